mod capture;
mod check;
mod common;
mod kernel;
mod mlp;
mod replay;
mod train;
