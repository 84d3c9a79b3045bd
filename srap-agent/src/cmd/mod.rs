//! One module per `srap-agent` command: the glue between its arguments and
//! the libraries (`srap-daemon`, `srap-lab`).

pub mod detach;
pub mod receiver;
pub mod sender;
pub mod verify;

/// A refused combination of flags or settings: said as every error is,
/// then exit status 2, which the units do not restart on (editing the
/// settings is the fix).
pub fn usage_error(err: &anyhow::Error) -> ! {
    eprintln!(
        "srap-agent: error: {}",
        srap_host::report::Chain(err.as_ref())
    );
    std::process::exit(2)
}

/// [`usage_error`] as any type, for `unwrap_or_else` on a `--check`'s
/// steps (each of which may refuse).
pub fn refused<T>(err: impl Into<anyhow::Error>) -> T {
    usage_error(&err.into())
}
