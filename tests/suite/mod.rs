mod common;
mod kernel;
