//! K-major copies of TF32 weights that are read again (decision record 0009).
//!
//! TF32 `wgmma` reads both operands K-major, and Burn's Linear weight `[d_in, d_out]` is
//! N-major, so every f32 launch first copies its weight K-major: at 2048³ the copy moves as
//! many bytes as the matmul reads. A weight read again (inference, or any parameter a
//! forward reads twice) keeps its copy under its burn-fusion tensor id, whose contents never
//! change (a tensor Burn changes is a new id), and later launches read the kept copy.
//!
//! A copy is kept on the second launch that makes it (a training step's weight is read once
//! before the optimizer replaces it, and keeping its copy would only hold memory), within
//! [`weight-copies-mib`](crate::config::HypatiaConfig::weight_copies_mib), the least recently
//! read going first; the tensor's last reader drops its copies ([`forget`]).

use super::transpose::transposed;
use crate::config::WeightCopies;
use burn_cubecl::CubeRuntime;
use burn_cubecl::tensor::CubeTensor;
use std::any::Any;
use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

/// What a copy is kept under: its source's stable id and the matrix copied
/// (`[rows, cols, pitch]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct CopyKey {
    /// The source tensor's burn-fusion id.
    pub id: u64,
    /// The source matrix as the copy read it.
    pub dims: [usize; 3],
}

/// Copies of type `V` within a byte budget, least recently read evicted first.
pub(crate) struct Copies<V> {
    /// Keys made once and not kept, most recent last.
    seen: VecDeque<CopyKey>,
    /// Kept copies and their sizes, most recently read last.
    kept: VecDeque<(CopyKey, usize, V)>,
    bytes: usize,
}

/// How many keys made once are remembered: more than a model's weights per forward.
const SEEN: usize = 256;

impl<V> Copies<V> {
    /// Nothing seen or kept.
    pub(crate) const fn new() -> Self {
        Self {
            seen: VecDeque::new(),
            kept: VecDeque::new(),
            bytes: 0,
        }
    }

    /// The copy kept for `key`, now the most recently read.
    pub(crate) fn get(&mut self, key: CopyKey) -> Option<&V> {
        let at = self.kept.iter().position(|(k, ..)| *k == key)?;
        let entry = self.kept.remove(at)?;
        self.kept.push_back(entry);
        self.kept.back().map(|(_, _, copy)| copy)
    }

    /// `copy` of `bytes` was just made for `key`: kept if `key` was made before and `copy` fits
    /// `budget` bytes (evicting the least recently read), else remembered as made once.
    pub(crate) fn made(&mut self, key: CopyKey, bytes: usize, copy: V, budget: usize) {
        let Some(at) = self.seen.iter().position(|k| *k == key) else {
            if self.seen.len() == SEEN {
                self.seen.pop_front();
            }
            self.seen.push_back(key);
            return;
        };
        if bytes > budget {
            return;
        }
        self.seen.remove(at);
        while self.bytes + bytes > budget {
            let (_, evicted, _) = self.kept.pop_front().expect("kept bytes add up");
            self.bytes -= evicted;
        }
        self.bytes += bytes;
        self.kept.push_back((key, bytes, copy));
    }

    /// Drops every copy of tensor `id` and forgets it was made.
    pub(crate) fn forget(&mut self, id: u64) {
        self.seen.retain(|k| k.id != id);
        let bytes = &mut self.bytes;
        self.kept.retain(|(k, size, _)| {
            let keep = k.id != id;
            if !keep {
                *bytes -= size;
            }
            keep
        });
    }

    /// Bytes held by kept copies.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }
}

/// The process's copies: device tensors of any runtime (each a `CubeTensor<R>`).
pub(crate) static COPIES: Mutex<Copies<Box<dyn Any + Send>>> = Mutex::new(Copies::new());

/// Whether any launch has recorded a copy: until one does, [`forget`], called for every tensor
/// a fused launch releases (bf16 and f16 included), returns without taking the lock.
static RECORDED: AtomicBool = AtomicBool::new(false);

/// `w`'s `[k, n]` matrix (`dims`: `[k, n, pitch]`) K-major: the copy kept under `w`'s id
/// `id`, else a new one, kept if the module's rules and `budget` say so.
pub(crate) fn k_major<R: CubeRuntime>(
    w: &CubeTensor<R>,
    id: Option<u64>,
    dims: [usize; 3],
    budget: WeightCopies,
) -> Result<CubeTensor<R>, String> {
    let Some(id) = id else {
        return transposed(w, dims);
    };
    let key = CopyKey { id, dims };
    RECORDED.store(true, Ordering::Relaxed);
    let mut copies = COPIES.lock().unwrap_or_else(|e| e.into_inner());
    let kept = copies
        .get(key)
        .and_then(|copy| copy.downcast_ref::<CubeTensor<R>>());
    if let Some(copy) = kept {
        return Ok(copy.clone());
    }
    let copy = transposed(w, dims)?;
    let budget = budget.bytes();
    copies.made(key, dims[0] * dims[1] * 4, Box::new(copy.clone()), budget);
    Ok(copy)
}

/// Drops the K-major copies of tensor `id`: its last reader has run.
pub fn forget(id: u64) {
    if !RECORDED.load(Ordering::Relaxed) {
        return;
    }
    COPIES.lock().unwrap_or_else(|e| e.into_inner()).forget(id);
}

/// Bytes of device memory the kept copies hold, in every device.
pub fn kept_bytes() -> usize {
    COPIES.lock().unwrap_or_else(|e| e.into_inner()).bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(id: u64) -> CopyKey {
        CopyKey {
            id,
            dims: [64, 32, 32],
        }
    }

    #[test]
    fn a_copy_is_kept_the_second_time_it_is_made() {
        let mut copies = Copies::new();
        copies.made(key(1), 10, "a", 100);
        assert!(copies.get(key(1)).is_none(), "kept on the first make");
        copies.made(key(1), 10, "b", 100);
        assert_eq!(copies.get(key(1)), Some(&"b"));
        assert_eq!(copies.bytes(), 10);
        let other_view = CopyKey {
            dims: [32, 64, 64],
            ..key(1)
        };
        assert!(copies.get(other_view).is_none(), "another view of the id");
    }

    #[test]
    fn the_least_recently_read_goes_first_and_the_budget_holds() {
        let mut copies = Copies::new();
        for id in [1, 2, 3] {
            copies.made(key(id), 40, id, 100);
            copies.made(key(id), 40, id, 100);
        }
        // 1 evicted for 3 (40 + 40 + 40 > 100).
        assert!(copies.get(key(1)).is_none());
        assert_eq!(copies.bytes(), 80);
        // 2 read, so 3 goes for 4.
        assert_eq!(copies.get(key(2)), Some(&2));
        copies.made(key(4), 40, 4, 100);
        copies.made(key(4), 40, 4, 100);
        assert!(copies.get(key(3)).is_none());
        assert_eq!(copies.get(key(2)), Some(&2));
        assert_eq!(copies.get(key(4)), Some(&4));
        // Larger than the budget: never kept, nothing evicted.
        copies.made(key(5), 200, 5, 100);
        copies.made(key(5), 200, 5, 100);
        assert!(copies.get(key(5)).is_none());
        assert_eq!(copies.bytes(), 80);
        // A zero budget keeps nothing.
        copies.made(key(6), 1, 6, 0);
        copies.made(key(6), 1, 6, 0);
        assert!(copies.get(key(6)).is_none());
    }

    #[test]
    fn forgetting_a_tensor_drops_its_copies() {
        let mut copies = Copies::new();
        copies.made(key(1), 10, 1, 100);
        copies.made(key(1), 10, 1, 100);
        copies.made(key(2), 10, 2, 100);
        copies.forget(1);
        copies.forget(2);
        assert!(copies.get(key(1)).is_none());
        assert_eq!(copies.bytes(), 0);
        // 2 was made once and forgotten: its next make is a first again.
        copies.made(key(2), 10, 2, 100);
        assert!(copies.get(key(2)).is_none());
    }
}
