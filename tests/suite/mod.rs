mod capture;
mod check;
mod common;
mod fuser;
mod kernel;
mod mlp;
mod replay;
mod train;
