//! The rewrite rules, one table, and the conditions they use.

use super::{TensorAnalysis, TensorGraph, TensorInfo, TensorLang, find_shape};
use egg::{Id, Rewrite, Subst, Var, rewrite};

/// Every rule Hypatia runs, named after the rewrite it performs.
///
/// Backward (what `Autodiff` emits for Linear + ReLU): relu's gradient is
/// `mask_fill(dy · Wᵀ, pre <= 0, 0)`, a matmul gated by the forward's pre-activation, and a
/// weight gradient `xᵀ · dy` is a plain matmul; both run on Hypatia's kernels. GELU's
/// gradient (`gelu_backward(pre, dy · Wᵀ)`, for exact GELU; tanh GELU's `Autodiff` backward is
/// its ops' own) is the matmul times a function of the same gate. Either may first pass back
/// through dropout (`mul(mul_scalar(dy · Wᵀ, 1 / (1 - p)), mask)`), which the epilogue applies
/// too. SiLU's gradient, as `Autodiff` composes it from `x · sigmoid(x)`, is two products of
/// the matmul, one through a sigmoid recomputed from the gate: the epilogue computes both,
/// reading the forward's saved sigmoid as a second gate-shaped operand.
///
/// Relu has three spellings in Burn 0.21: `relu` (`mask_fill(x, x <= 0, 0)`), `clamp_min(x, 0)`
/// (`mask_fill(x, x < 0, 0)`) and `max_pair(x, zeros)` (`mask_where(x, x < z, z)`). All three keep
/// NaN, which is why they are the same function. The scalars are ids here; the plan checks
/// that they are zero before every execution.
///
/// The other activations are recognised from the ops Burn 0.21's default implementations
/// emit (`burn-backend`'s `ActivationOps`, `burn-tensor`'s `activation` module), scalars kept as
/// children: the plan checks each constant's value at run time ([`Epilogue::constants`]) and
/// hands LeakyReLU's slope and clamp's bounds to the kernel. A matmul is a Linear without a
/// bias, so every activation also fuses with a bias-less Linear.
///
/// [`Epilogue::constants`]: crate::kernel::Epilogue::constants
#[rustfmt::skip]
pub fn rules() -> Vec<Rewrite<TensorLang, TensorAnalysis>> {
    vec![
        rewrite!("add-commute";           "(add ?a ?b)"                          => "(add ?b ?a)"),
        rewrite!("mul-commute";           "(mul ?a ?b)"                          => "(mul ?b ?a)"),
        rewrite!("mask-fill-le-to-relu";  "(mask-fill ?x (le ?x ?s) ?t)"         => "(relu ?x)" if is_float("?x")),
        rewrite!("clamp-min-to-relu";     "(mask-fill ?x (lt ?x ?s) ?t)"         => "(relu ?x)" if is_float("?x")),
        rewrite!("max-pair-zeros-to-relu";"(mask-where ?x (lower ?x ?z) ?z)"     => "(relu ?x)" if is_zeros_like("?z", "?x")),
        rewrite!("relu-idempotent";       "(relu (relu ?x))"                     => "(relu ?x)"),
        // gelu: x * (erf(x / sqrt 2) + 1) / 2
        rewrite!("gelu";                  "(div-scalar (mul ?x (add-scalar (erf (div-scalar ?x ?a)) ?b)) ?c)" => "(gelu ?x ?a ?b ?c)" if is_float("?x")),
        // gelu_approximate: (x * (tanh((x + x^3 * 0.044715) * sqrt(2 / pi)) + 1)) * 0.5
        rewrite!("gelu-tanh";             "(mul-scalar (mul ?x (add-scalar (tanh (mul-scalar (add ?x (mul-scalar (powf-scalar ?x ?p) ?c)) ?s)) ?one)) ?half)" => "(gelu-tanh ?x ?p ?c ?s ?one ?half)" if is_float("?x")),
        // silu: x * sigmoid(x), sigmoid = cast(exp(-log(exp(-cast(x, f32)) + 1)), x's type)
        rewrite!("silu";                  "(mul ?x (cast (exp (mul-scalar (log (add-scalar (exp (mul-scalar (cast ?x ?f) ?n)) ?one)) ?m)) ?e))" => "(silu ?x ?n ?one ?m)" if is_float("?x")),
        // leaky_relu: mask_where(x, x < 0, x * slope)
        rewrite!("leaky-relu";            "(mask-where ?x (lt ?x ?z) (mul-scalar ?x ?slope))" => "(leaky-relu ?x ?z ?slope)" if is_float("?x")),
        rewrite!("matmul-unsqueezed-rhs"; "(matmul ?x (reshape ?w ?s))"          => "(matmul ?x ?w)" if unsqueezes_matrix("?w", "?s")),
        rewrite!("matmul-vecmat-swap";    "(swap-dims (matmul (swap-dims ?x ?d) ?w) ?d)" => "(matmul ?x ?w)" if swaps_batch_into_rows("?x", "?w", "?d")),
        rewrite!("matmul-add-to-linear";  "(add (matmul ?x ?w) ?b)"              => "(linear ?x ?w ?b)" if is_row_bias("?b", "?x", "?w")),
        rewrite!("matmul-is-linear";      "(matmul ?x ?w)"                       => "(linear ?x ?w no-bias)"),
        rewrite!("linear-unreshape-bias"; "(linear ?x ?w (reshape ?b ?s))"       => "(linear ?x ?w ?b)" if is_vector("?b")),
        rewrite!("linear-to-fused";       "(linear ?x ?w ?b)"                    => "(fused-linear ?x ?w ?b)" if has_bias("?b", &["?x", "?w", "?b"])),
        rewrite!("linear-relu-to-fused";  "(relu (linear ?x ?w ?b))"             => "(fused-linear-relu ?x ?w ?b)" if linear_operands(&["?x", "?w", "?b"])),
        rewrite!("linear-gelu-to-fused";  "(gelu (linear ?x ?w ?b) ?s1 ?s2 ?s3)" => "(fused-linear-gelu ?x ?w ?b ?s1 ?s2 ?s3)" if linear_operands(&["?x", "?w", "?b"])),
        rewrite!("linear-gelu-tanh-to-fused"; "(gelu-tanh (linear ?x ?w ?b) ?s1 ?s2 ?s3 ?s4 ?s5)" => "(fused-linear-gelu-tanh ?x ?w ?b ?s1 ?s2 ?s3 ?s4 ?s5)" if linear_operands(&["?x", "?w", "?b"])),
        rewrite!("linear-silu-to-fused";  "(silu (linear ?x ?w ?b) ?s1 ?s2 ?s3)" => "(fused-linear-silu ?x ?w ?b ?s1 ?s2 ?s3)" if linear_operands(&["?x", "?w", "?b"])),
        rewrite!("linear-leaky-relu-to-fused"; "(leaky-relu (linear ?x ?w ?b) ?z ?slope)" => "(fused-linear-leaky-relu ?x ?w ?b ?z ?slope)" if linear_operands(&["?x", "?w", "?b"])),
        // SwiGLU: `silu(x · w + bias) ⊙ (x · u)`, the up projection a second matmul of `x`.
        rewrite!("linear-swiglu-to-fused"; "(mul (silu (linear ?x ?w ?b) ?s1 ?s2 ?s3) (matmul ?x ?u))" => "(fused-linear-swiglu ?x ?w ?b ?u ?s1 ?s2 ?s3)" if up_projection_operands()),
        rewrite!("linear-clamp-to-fused"; "(clamp (linear ?x ?w ?b) ?lo ?hi)"    => "(fused-linear-clamp ?x ?w ?b ?lo ?hi)" if linear_operands(&["?x", "?w", "?b"])),
        rewrite!("matmul-to-fused";       "(matmul ?x ?w)"                       => "(fused-matmul ?x ?w)" if same_kernel_float(&["?x", "?w"])),
        rewrite!("chain-linear-relu";     "(fused-linear-relu ?h ?w ?b)"         => "(chain-linear-relu ?h ?w ?b)" if made_by_layer("?h")),
        rewrite!("chain-linear";          "(fused-linear ?h ?w ?b)"              => "(chain-linear ?h ?w ?b)" if made_by_layer("?h")),
        rewrite!("chain-linear-no-bias";  "(fused-matmul ?h ?w)"                 => "(chain-linear ?h ?w no-bias)" if made_by_layer("?h")),
        // gelu_backward: with t = tanh(x³·c1 + x·c2), t·h1 + ((x³·c3 + x·c4) · (-(t·t) + 1) + h2)
        rewrite!("gelu-grad";             "(add (mul-scalar (tanh (add (mul-scalar (powf-scalar ?x ?p) ?c1) (mul-scalar ?x ?c2))) ?h1) (add-scalar (mul (add (mul-scalar (powf-scalar ?x ?p) ?c3) (mul-scalar ?x ?c4)) (add-scalar (mul-scalar (mul (tanh (add (mul-scalar (powf-scalar ?x ?p) ?c1) (mul-scalar ?x ?c2))) (tanh (add (mul-scalar (powf-scalar ?x ?p) ?c1) (mul-scalar ?x ?c2)))) ?neg) ?one)) ?h2))" => "(gelu-grad ?x ?p ?c1 ?c2 ?c3 ?c4 ?neg ?one ?h1 ?h2)" if is_float("?x")),
        rewrite!("gelu-grad-to-fused";    "(mul (gelu-grad ?g ?p ?c1 ?c2 ?c3 ?c4 ?neg ?one ?h1 ?h2) (matmul ?x ?w))" => "(fused-matmul-gelu-grad ?x ?w ?g ?p ?c1 ?c2 ?c3 ?c4 ?neg ?one ?h1 ?h2)" if gates_output(&["?g"], &["?x", "?w", "?g"])),
        // Dropout's backward before the gate: `mul(mul_scalar(dy · Wᵀ, 1 / (1 - p)), mask)`.
        rewrite!("relu-grad-dropout-to-fused"; "(mask-fill (mul (mul-scalar (matmul ?x ?w) ?c) ?m) (le ?g ?s) ?t)" => "(fused-matmul-relu-grad-dropout ?x ?w ?g ?m ?c)" if gates_output(&["?g", "?m"], &["?x", "?w", "?g", "?m"])),
        rewrite!("gelu-grad-dropout-to-fused"; "(mul (gelu-grad ?g ?p ?c1 ?c2 ?c3 ?c4 ?neg ?one ?h1 ?h2) (mul (mul-scalar (matmul ?x ?w) ?c) ?m))" => "(fused-matmul-gelu-grad-dropout ?x ?w ?g ?m ?p ?c1 ?c2 ?c3 ?c4 ?neg ?one ?h1 ?h2 ?c)" if gates_output(&["?g", "?m"], &["?x", "?w", "?g", "?m"])),
        // sigmoid: cast(exp(-log(exp(-cast(x, f32)) + 1)), x's type), burn-backend's `sigmoid`
        rewrite!("sigmoid";               "(cast (exp (mul-scalar (log (add-scalar (exp (mul-scalar (cast ?x ?f) ?n)) ?one)) ?m)) ?e)" => "(sigmoid ?x ?n ?one ?m)" if is_float("?x")),
        // SiLU's backward (`Autodiff` of `x · sigmoid(x)`, s its saved sigmoid, g = dy · Wᵀ):
        // `g · s + (σ · (-σ + 1)) · (g · x)`, σ recomputed from x by `sigmoid`'s backward.
        rewrite!("silu-grad-to-fused";    "(add (mul (matmul ?a ?w) ?s) (mul (mul (sigmoid ?x ?n ?one ?m) (add-scalar (mul-scalar (sigmoid ?x ?n ?one ?m) ?n2) ?one2)) (mul (matmul ?a ?w) ?x)))" => "(fused-matmul-silu-grad ?a ?w ?x ?s ?n ?one ?m ?n2 ?one2)" if gates_output(&["?x", "?s"], &["?a", "?w", "?x", "?s"])),
        // Tanh GELU's backward (`Autodiff` of `gelu_approximate`'s ops, g = dy · Wᵀ, u its saved
        // `tanh(i) + 1`, i the tanh's saved input): with h = g · 0.5 and
        // d = ((h · x) · (-(tanh(i)²) + 1)) · √(2/π), `(d + h · u) + (d · 0.044715) · ((x · x) · 3)`.
        rewrite!("gelu-tanh-grad-to-fused"; "(add (add (mul-scalar (mul (mul (mul-scalar (matmul ?a ?w) ?h) ?x) (add-scalar (mul-scalar (mul (tanh ?i) (tanh ?i)) ?neg) ?one)) ?c) (mul (mul-scalar (matmul ?a ?w) ?h) ?u)) (mul (mul-scalar (mul-scalar (mul (mul (mul-scalar (matmul ?a ?w) ?h) ?x) (add-scalar (mul-scalar (mul (tanh ?i) (tanh ?i)) ?neg) ?one)) ?c) ?k) (mul-scalar (mul ?x ?x) ?three)))" => "(fused-matmul-gelu-tanh-grad ?a ?w ?x ?u ?i ?h ?neg ?one ?c ?k ?three)" if gates_output(&["?x", "?u", "?i"], &["?a", "?w", "?x", "?u", "?i"])),
        // SwiGLU's gate-projection backward (`Autodiff` of `silu(a) ⊙ b`, b the up projection):
        // SiLU's backward of the product's gradient `(dy · Wᵀ) ⊙ b`.
        rewrite!("swiglu-grad-to-fused";  "(add (mul (mul (matmul ?a ?w) ?b) ?s) (mul (mul (sigmoid ?x ?n ?one ?m) (add-scalar (mul-scalar (sigmoid ?x ?n ?one ?m) ?n2) ?one2)) (mul (mul (matmul ?a ?w) ?b) ?x)))" => "(fused-matmul-swiglu-grad ?a ?w ?x ?s ?b ?n ?one ?m ?n2 ?one2)" if gates_output(&["?x", "?s", "?b"], &["?a", "?w", "?x", "?s", "?b"])),
        rewrite!("relu-grad-to-fused";    "(mask-fill (matmul ?x ?w) (le ?g ?s) ?t)" => "(fused-matmul-relu-grad ?x ?w ?g)" if gates_output(&["?g"], &["?x", "?w", "?g"])),
        // LeakyReLU's backward (`Autodiff` of `mask_where(x, m, x · slope)`, m its saved
        // `x < 0`, g = dy · Wᵀ): `mask_where(g, m, 0) + mask_where(0, m, g) · slope`.
        rewrite!("leaky-relu-grad-to-fused"; "(add (mask-where (matmul ?a ?w) ?m ?z) (mul-scalar (mask-where ?z2 ?m (matmul ?a ?w)) ?slope))" => "(fused-matmul-leaky-relu-grad ?a ?w ?m ?slope)" if leaky_relu_grad_operands()),
    ]
}

type Condition = Box<dyn Fn(&mut TensorGraph, Id, &Subst) -> bool + Send + Sync>;

fn info(egraph: &TensorGraph, subst: &Subst, var: Var) -> Option<TensorInfo> {
    egraph[subst[var]].data.clone()
}

fn var(name: &str) -> Var {
    name.parse().expect("rule variables are written ?name")
}

/// `?h` is the output of a fused forward layer (Linear with ReLU or without activation): a
/// layer reading it may join that layer's launch.
fn made_by_layer(h: &str) -> impl Fn(&mut TensorGraph, Id, &Subst) -> bool {
    let h = var(h);
    move |egraph, _, subst| {
        egraph[subst[h]]
            .nodes
            .iter()
            .any(TensorLang::is_chain_layer)
    }
}

/// `?x` is a floating-point tensor.
fn is_float(x: &str) -> impl Fn(&mut TensorGraph, Id, &Subst) -> bool {
    let x = var(x);
    move |egraph, _, subst| {
        info(egraph, subst, x)
            .is_some_and(|i| !matches!(i.elem, super::Elem::Bool | super::Elem::Other))
    }
}

/// `?z` is created as zeros (or `full`, whose scalar the plan guards) with `?x`'s shape.
fn is_zeros_like(z: &str, x: &str) -> impl Fn(&mut TensorGraph, Id, &Subst) -> bool {
    let (z, x) = (var(z), var(x));
    move |egraph, _, subst| {
        let created = egraph[subst[z]]
            .nodes
            .iter()
            .any(|node| matches!(node, TensorLang::Zeros(_) | TensorLang::Full(_)));
        let same_shape = match (info(egraph, subst, z), info(egraph, subst, x)) {
            (Some(z), Some(x)) => z.shape == x.shape,
            _ => false,
        };
        created && same_shape
    }
}

/// `(reshape ?w ?s)` only prepends size-1 dims to the matrix `?w` (Burn's weight unsqueeze).
fn unsqueezes_matrix(w: &str, s: &str) -> impl Fn(&mut TensorGraph, Id, &Subst) -> bool {
    let (w, s) = (var(w), var(s));
    move |egraph, _, subst| {
        let (Some(w), Some(target)) = (info(egraph, subst, w), find_shape(egraph, subst[s])) else {
            return false;
        };
        let pad = target.len().saturating_sub(2);
        w.shape.len() == 2
            && target.len() >= 2
            && target[pad..] == w.shape[..]
            && target[..pad].iter().all(|&d| d == 0)
    }
}

/// `?d` swaps the last batch dim of `?x` with its row dim, and `?w` is broadcast along that
/// batch dim. Burn's `Tensor::matmul` does this swap for `[.., B, 1, K] @ [.., 1, K, N]`; the
/// swapped product equals the plain one whenever `?w` does not vary along the batch dim.
fn swaps_batch_into_rows(
    x: &str,
    w: &str,
    d: &str,
) -> impl Fn(&mut TensorGraph, Id, &Subst) -> bool {
    let (x, w, d) = (var(x), var(w), var(d));
    move |egraph, _, subst| {
        let (Some(x), Some(w)) = (info(egraph, subst, x), info(egraph, subst, w)) else {
            return false;
        };
        let Some(dims) = egraph[subst[d]].nodes.iter().find_map(|n| match n {
            TensorLang::Dims(leaf) => Some((leaf.0.min(leaf.1), leaf.0.max(leaf.1))),
            _ => None,
        }) else {
            return false;
        };
        let rank = x.shape.len();
        // w's dim aligned (from the right) with x's batch dim `rank - 3`; absent means 1.
        let w_batch_is_one = match w.shape.len().checked_sub(3) {
            Some(i) => w.shape[i] == 0,
            None => true,
        };
        rank >= 3 && dims == (rank - 3, rank - 2) && w_batch_is_one
    }
}

/// `?b` broadcasts along rows only: its last dim is `?w`'s last and every other dim is 1.
fn is_row_bias(b: &str, x: &str, w: &str) -> impl Fn(&mut TensorGraph, Id, &Subst) -> bool {
    let (b, x, w) = (var(b), var(x), var(w));
    move |egraph, _, subst| {
        let (Some(b), Some(x), Some(w)) = (
            info(egraph, subst, b),
            info(egraph, subst, x),
            info(egraph, subst, w),
        ) else {
            return false;
        };
        let Some((last, rest)) = b.shape.split_last() else {
            return false;
        };
        let out_rank = x.shape.len().max(w.shape.len());
        Some(last) == w.shape.last() && rest.iter().all(|&d| d == 0) && b.shape.len() <= out_rank
    }
}

/// `?b` is a rank-1 tensor.
fn is_vector(b: &str) -> impl Fn(&mut TensorGraph, Id, &Subst) -> bool {
    let b = var(b);
    move |egraph, _, subst| info(egraph, subst, b).is_some_and(|i| i.shape.len() == 1)
}

/// Each of `gates` has the matched output's shape (a gate or a mask is read element for
/// element) and `vars` share a kernel float type.
fn gates_output(gates: &[&str], vars: &[&str]) -> impl Fn(&mut TensorGraph, Id, &Subst) -> bool {
    let gates: Vec<Var> = gates.iter().map(|g| var(g)).collect();
    let same_float = same_kernel_float(vars);
    move |egraph, id, subst| {
        let out = egraph[id].data.clone();
        let shaped = |g: &Var| {
            let g = info(egraph, subst, *g);
            (out.as_ref()).is_some_and(|o| g.is_some_and(|g| g.shape == o.shape))
        };
        gates.iter().all(shaped) && same_float(egraph, id, subst)
    }
}

/// LeakyReLU's backward: `?m` is a bool mask of the output's shape, `?z` and `?z2` zeros of
/// that shape, and the matmul's operands share a kernel float type.
fn leaky_relu_grad_operands() -> impl Fn(&mut TensorGraph, Id, &Subst) -> bool {
    let m = var("?m");
    let gated = gates_output(&["?m"], &["?a", "?w"]);
    let (zeros, zeros2) = (is_zeros_like("?z", "?m"), is_zeros_like("?z2", "?m"));
    move |egraph, id, subst| {
        let bool_mask = info(egraph, subst, m).is_some_and(|i| i.elem == super::Elem::Bool);
        bool_mask
            && gated(egraph, id, subst)
            && zeros(egraph, id, subst)
            && zeros2(egraph, id, subst)
    }
}

/// SwiGLU's forward: `[?x, ?w, ?b]` are a Linear's operands, and the up projection's weight
/// `?u` has the gate projection's shape and type (so `x · u` has the Linear's shape).
fn up_projection_operands() -> Condition {
    let (w, u) = (var("?w"), var("?u"));
    let linear = linear_operands(&["?x", "?w", "?b"]);
    let same_float = same_kernel_float(&["?x", "?w", "?u"]);
    Box::new(move |egraph, id, subst| {
        let shape = |v| info(egraph, subst, v).map(|i| i.shape);
        shape(w).is_some()
            && shape(w) == shape(u)
            && linear(egraph, id, subst)
            && same_float(egraph, id, subst)
    })
}

/// `?b` is a bias (not `no-bias`) and `vars` share a kernel float type.
fn has_bias(b: &str, vars: &[&str]) -> Condition {
    let b = var(b);
    let same_float = same_kernel_float(vars);
    Box::new(move |egraph, id, subst| {
        !is_no_bias(egraph, subst[b]) && same_float(egraph, id, subst)
    })
}

/// `[x, w, b]` of a Linear share a kernel float type; the bias may be `no-bias`.
fn linear_operands(vars: &[&str; 3]) -> Condition {
    let b = var(vars[2]);
    let with_bias = same_kernel_float(vars);
    let without = same_kernel_float(&vars[..2]);
    Box::new(
        move |egraph, id, subst| match is_no_bias(egraph, subst[b]) {
            true => without(egraph, id, subst),
            false => with_bias(egraph, id, subst),
        },
    )
}

/// Whether e-class `class` is `no-bias`: the bias slot of a bias-less Linear.
pub fn is_no_bias(egraph: &TensorGraph, class: Id) -> bool {
    egraph[class]
        .nodes
        .iter()
        .any(|node| matches!(node, TensorLang::NoBias(_)))
}

/// All `vars` share one element type that the fused kernel supports.
fn same_kernel_float(vars: &[&str]) -> Condition {
    let vars: Vec<Var> = vars.iter().map(|v| var(v)).collect();
    Box::new(move |egraph, _, subst| {
        let elems: Option<Vec<_>> = vars
            .iter()
            .map(|&v| info(egraph, subst, v).map(|i| i.elem))
            .collect();
        elems.is_some_and(|e| e[0].is_kernel_float() && e.iter().all(|x| *x == e[0]))
    })
}

#[cfg(test)]
mod tests {
    use crate::rewrite::{Limits, TensorGraph, saturate};

    /// Saturates `input` and returns its cheapest equivalent term.
    fn best(input: &str) -> String {
        let mut egraph = TensorGraph::default();
        let root = egraph.add_expr(&input.parse().unwrap());
        saturate(egraph, &Limits::default())
            .find_best(root)
            .1
            .to_string()
    }

    macro_rules! rewrite_test {
        ($name:ident, $input:expr => $expected:expr) => {
            #[test]
            fn $name() {
                assert_eq!(best($input), $expected);
            }
        };
    }

    const X: &str = "t1:f32:1x2";
    const W: &str = "t2:f32:2x3";
    const B: &str = "t3:f32:3";

    fn relu_of(pre: &str) -> String {
        format!("(mask-fill {pre} (le {pre} scalar:0) scalar:1)")
    }

    rewrite_test!(relu_of_linear_fuses,
        &relu_of(&format!("(add (matmul {X} {W}) (reshape {B} shape:0x3))"))
        => format!("(fused-linear-relu {X} {W} {B})"));
    rewrite_test!(bias_first_fuses,
        &relu_of(&format!("(add (reshape {B} shape:0x3) (matmul {X} {W}))"))
        => format!("(fused-linear-relu {X} {W} {B})"));
    rewrite_test!(row_bias_without_reshape_fuses,
        &relu_of(&format!("(add (matmul {X} {W}) t4:f32:0x3)"))
        => format!("(fused-linear-relu {X} {W} t4:f32:0x3)"));
    rewrite_test!(unsqueezed_weight_fuses,
        &relu_of("(add (matmul t1:f32:4x1x2 (reshape t2:f32:2x3 shape:0x2x3)) (reshape t3:f32:3 shape:0x0x3))")
        => "(fused-linear-relu t1:f32:4x1x2 t2:f32:2x3 t3:f32:3)");
    rewrite_test!(clamp_min_fuses,
        &format!("(mask-fill (add (matmul {X} {W}) t4:f32:0x3) (lt (add (matmul {X} {W}) t4:f32:0x3) scalar:0) scalar:1)")
        => format!("(fused-linear-relu {X} {W} t4:f32:0x3)"));
    rewrite_test!(max_pair_with_zeros_fuses,
        &format!("(mask-where (add (matmul {X} {W}) t4:f32:0x3) (lower (add (matmul {X} {W}) t4:f32:0x3) (zeros shape:1x3)) (zeros shape:1x3))")
        => format!("(fused-linear-relu {X} {W} t4:f32:0x3)"));
    rewrite_test!(max_pair_with_a_tensor_stays,
        &format!("(mask-where (add (matmul {X} {W}) t4:f32:0x3) (lower (add (matmul {X} {W}) t4:f32:0x3) t5:f32:1x3) t5:f32:1x3)")
        => format!("(mask-where (fused-linear {X} {W} t4:f32:0x3) (lower (fused-linear {X} {W} t4:f32:0x3) t5:f32:1x3) t5:f32:1x3)"));
    rewrite_test!(vecmat_swap_fuses,
        &relu_of("(add (swap-dims (matmul (swap-dims t1:f32:2x0x3 dims:0,1) (reshape t2:f32:3x4 shape:0x3x4)) dims:0,1) (reshape t3:f32:4 shape:0x0x4))")
        => "(fused-linear-relu t1:f32:2x0x3 t2:f32:3x4 t3:f32:4)");
    rewrite_test!(swap_of_a_batched_weight_stays,
        "(swap-dims (matmul (swap-dims t1:f32:2x0x3 dims:0,1) t2:f32:2x3x4) dims:0,1)"
        => "(swap-dims (fused-matmul (swap-dims t1:f32:2x0x3 dims:0,1) t2:f32:2x3x4) dims:0,1)");
    rewrite_test!(relu_on_another_tensor_stays,
        &format!("(mask-fill (add (matmul {X} {W}) t4:f32:0x3) (le t5:f32:1x3 scalar:0) scalar:1)")
        => format!("(mask-fill (fused-linear {X} {W} t4:f32:0x3) (le t5:f32:1x3 scalar:0) scalar:1)"));
    rewrite_test!(full_tensor_add_stays,
        &relu_of(&format!("(add (matmul {X} {W}) t4:f32:1x3)"))
        => format!("(relu (add (fused-matmul {X} {W}) t4:f32:1x3))"));
    rewrite_test!(plain_matmul_fuses,
        &format!("(matmul {X} {W})")
        => format!("(fused-matmul {X} {W})"));
    rewrite_test!(transposed_lhs_matmul_fuses,
        "(matmul (swap-dims t1:f32:2x1 dims:0,1) t2:f32:2x3)"
        => "(fused-matmul (swap-dims t1:f32:2x1 dims:0,1) t2:f32:2x3)");
    rewrite_test!(relu_backward_fuses,
        "(mask-fill (matmul t1:f32:1x3 (swap-dims t2:f32:2x3 dims:0,1)) (le t5:f32:1x2 scalar:0) scalar:1)"
        => "(fused-matmul-relu-grad t1:f32:1x3 (swap-dims t2:f32:2x3 dims:0,1) t5:f32:1x2)");
    rewrite_test!(broadcast_gate_stays,
        &format!("(mask-fill (matmul {X} {W}) (le t5:f32:0x3 scalar:0) scalar:1)")
        => format!("(mask-fill (fused-matmul {X} {W}) (le t5:f32:0x3 scalar:0) scalar:1)"));
    rewrite_test!(mixed_dtypes_stay,
        &relu_of(&format!("(add (matmul {X} {W}) t4:f16:0x3)"))
        => format!("(relu (add (fused-matmul {X} {W}) t4:f16:0x3))"));

    const PRE: &str = "(add (matmul t1:f32:1x2 t2:f32:2x3) (reshape t3:f32:3 shape:0x3))";

    fn gelu_of(x: &str) -> String {
        format!(
            "(div-scalar (mul {x} (add-scalar (erf (div-scalar {x} scalar:0)) scalar:1)) scalar:2)"
        )
    }

    fn gelu_tanh_of(x: &str) -> String {
        format!(
            "(mul-scalar (mul {x} (add-scalar (tanh (mul-scalar (add {x} (mul-scalar (powf-scalar {x} scalar:0) scalar:1)) scalar:2)) scalar:3)) scalar:4)"
        )
    }

    fn silu_of(x: &str, elem: &str) -> String {
        format!(
            "(mul {x} (cast (exp (mul-scalar (log (add-scalar (exp (mul-scalar (cast {x} elem:f32) scalar:0)) scalar:1)) scalar:2)) elem:{elem}))"
        )
    }

    /// Burn's `gelu_backward` derivative of `x` (scalars 10 to 18, its constants' order).
    fn gelu_grad_of(x: &str) -> String {
        let x3 = format!("(powf-scalar {x} scalar:10)");
        let t = format!("(tanh (add (mul-scalar {x3} scalar:11) (mul-scalar {x} scalar:12)))");
        let inner2 = format!("(add (mul-scalar {x3} scalar:13) (mul-scalar {x} scalar:14))");
        let sech = format!("(add-scalar (mul-scalar (mul {t} {t}) scalar:15) scalar:16)");
        format!("(add (mul-scalar {t} scalar:17) (add-scalar (mul {inner2} {sech}) scalar:18))")
    }

    const GELU_GRAD_SCALARS: &str =
        "scalar:10 scalar:11 scalar:12 scalar:13 scalar:14 scalar:15 scalar:16 scalar:17 scalar:18";

    rewrite_test!(gelu_backward_fuses,
        &format!("(mul {} (matmul t1:f32:1x3 (swap-dims t2:f32:2x3 dims:0,1)))", gelu_grad_of("t5:f32:1x2"))
        => format!("(fused-matmul-gelu-grad t1:f32:1x3 (swap-dims t2:f32:2x3 dims:0,1) t5:f32:1x2 {GELU_GRAD_SCALARS})"));
    rewrite_test!(gelu_backward_with_grad_first_fuses,
        &format!("(mul (matmul t1:f32:1x3 t2:f32:3x2) {})", gelu_grad_of("t5:f32:1x2"))
        => format!("(fused-matmul-gelu-grad t1:f32:1x3 t2:f32:3x2 t5:f32:1x2 {GELU_GRAD_SCALARS})"));
    rewrite_test!(gelu_backward_on_a_broadcast_gate_stays,
        &format!("(mul {} (matmul t1:f32:1x3 t2:f32:3x2))", gelu_grad_of("t5:f32:0x2"))
        => format!("(mul (gelu-grad t5:f32:0x2 {GELU_GRAD_SCALARS}) (fused-matmul t1:f32:1x3 t2:f32:3x2))"));

    /// `Autodiff`'s gradient of `silu(x)` for the matmul `g`, s the saved sigmoid (scalars 20
    /// to 24, the order of `Epilogue::SiluGrad`'s constants); `commuted` swaps every sum's and
    /// product's operands.
    fn silu_grad_of(g: &str, x: &str, s: &str, commuted: bool) -> String {
        let pair = |a: &str, b: &str| match commuted {
            true => format!("{b} {a}"),
            false => format!("{a} {b}"),
        };
        let sigmoid = format!(
            "(cast (exp (mul-scalar (log (add-scalar (exp (mul-scalar (cast {x} elem:f32) scalar:20)) scalar:21)) scalar:22)) elem:f32)"
        );
        let one_minus = format!("(add-scalar (mul-scalar {sigmoid} scalar:23) scalar:24)");
        let derivative = format!("(mul {})", pair(&sigmoid, &one_minus));
        let direct = format!("(mul {})", pair(g, s));
        let through = format!(
            "(mul {})",
            pair(&derivative, &format!("(mul {})", pair(g, x)))
        );
        format!("(add {})", pair(&direct, &through))
    }

    const SILU_GRAD_SCALARS: &str = "scalar:20 scalar:21 scalar:22 scalar:23 scalar:24";

    rewrite_test!(silu_backward_fuses,
        &silu_grad_of("(matmul t1:f32:1x3 (swap-dims t2:f32:2x3 dims:0,1))", "t5:f32:1x2", "t6:f32:1x2", false)
        => format!("(fused-matmul-silu-grad t1:f32:1x3 (swap-dims t2:f32:2x3 dims:0,1) t5:f32:1x2 t6:f32:1x2 {SILU_GRAD_SCALARS})"));
    rewrite_test!(swiglu_backward_fuses,
        &silu_grad_of("(mul (matmul t1:f32:1x3 (swap-dims t2:f32:2x3 dims:0,1)) t7:f32:1x2)", "t5:f32:1x2", "t6:f32:1x2", false)
        => format!("(fused-matmul-swiglu-grad t1:f32:1x3 (swap-dims t2:f32:2x3 dims:0,1) t5:f32:1x2 t6:f32:1x2 t7:f32:1x2 {SILU_GRAD_SCALARS})"));
    rewrite_test!(swiglu_backward_with_its_products_commuted_fuses,
        &silu_grad_of("(mul t7:f32:1x2 (matmul t1:f32:1x3 t2:f32:3x2))", "t5:f32:1x2", "t6:f32:1x2", true)
        => format!("(fused-matmul-swiglu-grad t1:f32:1x3 t2:f32:3x2 t5:f32:1x2 t6:f32:1x2 t7:f32:1x2 {SILU_GRAD_SCALARS})"));

    /// A broadcast up projection is not read element for element.
    #[test]
    fn swiglu_backward_with_a_broadcast_up_projection_stays() {
        let g = "(mul (matmul t1:f32:1x3 t2:f32:3x2) t7:f32:0x2)";
        let best = best(&silu_grad_of(g, "t5:f32:1x2", "t6:f32:1x2", false));
        assert!(!best.contains("swiglu-grad"), "{best}");
    }

    rewrite_test!(silu_backward_with_its_sums_and_products_commuted_fuses,
        &silu_grad_of("(matmul t1:f32:1x3 t2:f32:3x2)", "t5:f32:1x2", "t6:f32:1x2", true)
        => format!("(fused-matmul-silu-grad t1:f32:1x3 t2:f32:3x2 t5:f32:1x2 t6:f32:1x2 {SILU_GRAD_SCALARS})"));

    /// A saved sigmoid that is broadcast (or a gate that is) is not read element for element.
    #[test]
    fn silu_backward_with_a_broadcast_operand_stays() {
        for (x, s) in [("t5:f32:1x2", "t6:f32:0x2"), ("t5:f32:0x2", "t6:f32:1x2")] {
            let best = best(&silu_grad_of("(matmul t1:f32:1x3 t2:f32:3x2)", x, s, false));
            assert!(!best.contains("silu-grad"), "{best}");
            assert!(
                best.contains("(fused-matmul t1:f32:1x3 t2:f32:3x2)"),
                "{best}"
            );
        }
    }

    /// `Autodiff`'s gradient of `gelu_approximate(x)` for the matmul `g`, u its saved `tanh + 1`
    /// and i its saved tanh input (scalars 30 to 35, the order of `Epilogue::GeluTanhGrad`'s
    /// constants); `commuted` swaps every sum's and product's operands.
    fn gelu_tanh_grad_of(g: &str, x: &str, u: &str, i: &str, commuted: bool) -> String {
        let pair = |a: &str, b: &str| match commuted {
            true => format!("{b} {a}"),
            false => format!("{a} {b}"),
        };
        let half = format!("(mul-scalar {g} scalar:30)");
        let t = format!("(tanh {i})");
        let sech = format!("(add-scalar (mul-scalar (mul {t} {t}) scalar:31) scalar:32)");
        let through = format!(
            "(mul {})",
            pair(&format!("(mul {})", pair(&half, x)), &sech)
        );
        let d = format!("(mul-scalar {through} scalar:33)");
        let direct = format!("(mul {})", pair(&half, u));
        let power = format!("(mul-scalar (mul {x} {x}) scalar:35)");
        let cubed = format!(
            "(mul {})",
            pair(&format!("(mul-scalar {d} scalar:34)"), &power)
        );
        format!(
            "(add {})",
            pair(&format!("(add {})", pair(&d, &direct)), &cubed)
        )
    }

    const GELU_TANH_GRAD_SCALARS: &str =
        "scalar:30 scalar:31 scalar:32 scalar:33 scalar:34 scalar:35";

    rewrite_test!(gelu_tanh_backward_fuses,
        &gelu_tanh_grad_of("(matmul t1:f32:1x3 (swap-dims t2:f32:2x3 dims:0,1))", "t5:f32:1x2", "t6:f32:1x2", "t7:f32:1x2", false)
        => format!("(fused-matmul-gelu-tanh-grad t1:f32:1x3 (swap-dims t2:f32:2x3 dims:0,1) t5:f32:1x2 t6:f32:1x2 t7:f32:1x2 {GELU_TANH_GRAD_SCALARS})"));
    rewrite_test!(gelu_tanh_backward_with_its_sums_and_products_commuted_fuses,
        &gelu_tanh_grad_of("(matmul t1:f32:1x3 t2:f32:3x2)", "t5:f32:1x2", "t6:f32:1x2", "t7:f32:1x2", true)
        => format!("(fused-matmul-gelu-tanh-grad t1:f32:1x3 t2:f32:3x2 t5:f32:1x2 t6:f32:1x2 t7:f32:1x2 {GELU_TANH_GRAD_SCALARS})"));

    /// A saved value that is broadcast (or a gate that is) is not read element for element.
    #[test]
    fn gelu_tanh_backward_with_a_broadcast_operand_stays() {
        let (full, row) = ("t5:f32:1x2", "t8:f32:0x2");
        for (x, u, i) in [(row, full, full), (full, row, full), (full, full, row)] {
            let g = "(matmul t1:f32:1x3 t2:f32:3x2)";
            let best = best(&gelu_tanh_grad_of(g, x, u, i, false));
            assert!(!best.contains("gelu-tanh-grad"), "{best}");
        }
    }

    /// `Autodiff`'s gradient of `leaky_relu(x)` for the matmul `g`, m its saved mask
    /// (`commuted` swaps the sum's operands).
    fn leaky_relu_grad_of(g: &str, m: &str, zeros: &str, commuted: bool) -> String {
        let kept = format!("(mask-where {g} {m} {zeros})");
        let scaled = format!("(mul-scalar (mask-where {zeros} {m} {g}) scalar:40)");
        match commuted {
            true => format!("(add {scaled} {kept})"),
            false => format!("(add {kept} {scaled})"),
        }
    }

    rewrite_test!(leaky_relu_backward_fuses,
        &leaky_relu_grad_of("(matmul t1:f32:1x3 (swap-dims t2:f32:2x3 dims:0,1))", "t5:bool:1x2", "(zeros shape:1x2)", false)
        => "(fused-matmul-leaky-relu-grad t1:f32:1x3 (swap-dims t2:f32:2x3 dims:0,1) t5:bool:1x2 scalar:40)");
    rewrite_test!(leaky_relu_backward_with_its_sum_commuted_fuses,
        &leaky_relu_grad_of("(matmul t1:f32:1x3 t2:f32:3x2)", "t5:bool:1x2", "(zeros shape:1x2)", true)
        => "(fused-matmul-leaky-relu-grad t1:f32:1x3 t2:f32:3x2 t5:bool:1x2 scalar:40)");

    /// A broadcast mask, a float one, or a tensor in place of the zeros is not LeakyReLU's
    /// backward.
    #[test]
    fn leaky_relu_backward_with_other_operands_stays() {
        let g = "(matmul t1:f32:1x3 t2:f32:3x2)";
        for (m, zeros) in [
            ("t5:bool:0x2", "(zeros shape:1x2)"),
            ("t5:f32:1x2", "(zeros shape:1x2)"),
            ("t5:bool:1x2", "t6:f32:1x2"),
        ] {
            let best = best(&leaky_relu_grad_of(g, m, zeros, false));
            assert!(!best.contains("leaky-relu-grad"), "{best}");
        }
    }

    rewrite_test!(relu_backward_through_dropout_fuses,
        "(mask-fill (mul (mul-scalar (matmul t1:f32:1x3 t2:f32:3x2) scalar:7) t6:f32:1x2) (le t5:f32:1x2 scalar:0) scalar:1)"
        => "(fused-matmul-relu-grad-dropout t1:f32:1x3 t2:f32:3x2 t5:f32:1x2 t6:f32:1x2 scalar:7)");
    rewrite_test!(gelu_backward_through_dropout_fuses,
        &format!("(mul {} (mul t6:f32:1x2 (mul-scalar (matmul t1:f32:1x3 t2:f32:3x2) scalar:7)))", gelu_grad_of("t5:f32:1x2"))
        => format!("(fused-matmul-gelu-grad-dropout t1:f32:1x3 t2:f32:3x2 t5:f32:1x2 t6:f32:1x2 {GELU_GRAD_SCALARS} scalar:7)"));
    rewrite_test!(a_broadcast_mask_stays,
        "(mask-fill (mul (mul-scalar (matmul t1:f32:1x3 t2:f32:3x2) scalar:7) t6:f32:0x2) (le t5:f32:1x2 scalar:0) scalar:1)"
        => "(mask-fill (mul (mul-scalar (fused-matmul t1:f32:1x3 t2:f32:3x2) scalar:7) t6:f32:0x2) (le t5:f32:1x2 scalar:0) scalar:1)");

    rewrite_test!(gelu_of_linear_fuses,
        &gelu_of(PRE)
        => format!("(fused-linear-gelu {X} {W} {B} scalar:0 scalar:1 scalar:2)"));
    rewrite_test!(gelu_with_its_product_commuted_fuses,
        &format!("(div-scalar (mul (add-scalar (erf (div-scalar {PRE} scalar:0)) scalar:1) {PRE}) scalar:2)")
        => format!("(fused-linear-gelu {X} {W} {B} scalar:0 scalar:1 scalar:2)"));
    rewrite_test!(gelu_of_matmul_fuses_without_bias,
        &gelu_of(&format!("(matmul {X} {W})"))
        => format!("(fused-linear-gelu {X} {W} no-bias scalar:0 scalar:1 scalar:2)"));
    rewrite_test!(gelu_tanh_of_linear_fuses,
        &gelu_tanh_of(PRE)
        => format!("(fused-linear-gelu-tanh {X} {W} {B} scalar:0 scalar:1 scalar:2 scalar:3 scalar:4)"));
    rewrite_test!(silu_of_linear_fuses,
        &silu_of(PRE, "f32")
        => format!("(fused-linear-silu {X} {W} {B} scalar:0 scalar:1 scalar:2)"));
    rewrite_test!(silu_in_bf16_fuses,
        &silu_of("(add (matmul t1:bf16:1x2 t2:bf16:2x3) t3:bf16:3)", "bf16")
        => "(fused-linear-silu t1:bf16:1x2 t2:bf16:2x3 t3:bf16:3 scalar:0 scalar:1 scalar:2)");
    rewrite_test!(swiglu_of_two_matmuls_of_one_input_fuses,
        &format!("(mul {} (matmul {X} t4:f32:2x3))", silu_of(&format!("(matmul {X} {W})"), "f32"))
        => format!("(fused-linear-swiglu {X} {W} no-bias t4:f32:2x3 scalar:0 scalar:1 scalar:2)"));
    rewrite_test!(swiglu_with_the_up_projection_first_and_a_biased_gate_fuses,
        &format!("(mul (matmul {X} t4:f32:2x3) {})", silu_of(PRE, "f32"))
        => format!("(fused-linear-swiglu {X} {W} {B} t4:f32:2x3 scalar:0 scalar:1 scalar:2)"));

    /// The up projection must read the gate projection's input with a weight of its shape.
    #[test]
    fn swiglu_of_another_input_or_a_broadcast_weight_stays() {
        for up in [
            "(matmul t9:f32:1x2 t4:f32:2x3)",
            "(matmul t1:f32:1x2 t4:f32:1x2x3)",
        ] {
            let best = best(&format!(
                "(mul {} {up})",
                silu_of(&format!("(matmul {X} {W})"), "f32")
            ));
            assert!(!best.contains("swiglu"), "{best}");
            assert!(best.contains("fused-linear-silu"), "{best}");
        }
    }
    rewrite_test!(leaky_relu_of_linear_fuses,
        &format!("(mask-where {PRE} (lt {PRE} scalar:0) (mul-scalar {PRE} scalar:1))")
        => format!("(fused-linear-leaky-relu {X} {W} {B} scalar:0 scalar:1)"));
    rewrite_test!(leaky_relu_scaling_another_tensor_stays,
        &format!("(mask-where {PRE} (lt {PRE} scalar:0) (mul-scalar t9:f32:1x3 scalar:1))")
        => format!("(mask-where (fused-linear {X} {W} {B}) (lt (fused-linear {X} {W} {B}) scalar:0) (mul-scalar t9:f32:1x3 scalar:1))"));
    rewrite_test!(clamp_of_linear_fuses,
        &format!("(clamp {PRE} scalar:0 scalar:1)")
        => format!("(fused-linear-clamp {X} {W} {B} scalar:0 scalar:1)"));
    rewrite_test!(relu_of_matmul_fuses_without_bias,
        &relu_of(&format!("(matmul {X} {W})"))
        => format!("(fused-linear-relu {X} {W} no-bias)"));
    rewrite_test!(linear_without_activation_fuses,
        PRE
        => format!("(fused-linear {X} {W} {B})"));
    rewrite_test!(erf_of_another_tensor_stays,
        &format!("(div-scalar (mul {PRE} (add-scalar (erf (div-scalar t9:f32:1x3 scalar:0)) scalar:1)) scalar:2)")
        => format!("(div-scalar (mul (fused-linear {X} {W} {B}) (add-scalar (erf (div-scalar t9:f32:1x3 scalar:0)) scalar:1)) scalar:2)"));
}
