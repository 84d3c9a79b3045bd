//! One module per `srap-agent` command: the glue between its arguments and
//! the libraries (`srap-daemon`, `srap-lab`).

pub mod detach;
pub mod receiver;
pub mod sender;
pub mod verify;
