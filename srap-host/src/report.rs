//! How `srap`, `srap-agent` and `srap-lab` print the error that ends them:
//! each thing once, and never a backtrace; and the daemons' log set-up
//! ([`init_logs`]), one for both.
//!
//! Most of SRAP's errors write their cause into their own message (`"{path}:
//! {source}"`) *and* chain it as their `source()`, so anyhow's `{:#}`
//! printed every cause two or three times. [`Chain`] walks the chain and
//! adds a cause only when the text so far does not already say it.
//!
//! Expected failures (bad input, a peer that does not answer) are errors,
//! not crashes: they are printed with [`Chain`] by the binaries' `main`,
//! never through `Termination`'s `{:?}`, which would add anyhow's backtrace
//! whenever `RUST_BACKTRACE` is set. Panics keep Rust's own hook, backtrace
//! and all.

use std::{error::Error, fmt, process::ExitCode};

/// An error and its causes as one line, each cause said once.
pub struct Chain<'a>(pub &'a (dyn Error + 'static));

impl fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut said = self.0.to_string();
        let mut cause = self.0.source();
        while let Some(err) = cause {
            let text = err.to_string();
            if !text.is_empty() && !said.contains(&text) {
                said.push_str(": ");
                said.push_str(&text);
            }
            cause = err.source();
        }
        f.write_str(&said)
    }
}

/// The daemons' logs (`srap-agent`, `srap-lab`): tracing on stderr at
/// `info` unless `RUST_LOG` says otherwise, coloured only on a terminal, so
/// stdout stays the commands' own output (JSON reports, tables).
pub fn init_logs() {
    use std::io::IsTerminal as _;
    use tracing_subscriber::EnvFilter;

    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
}

/// `Ok` → success; `Err` → `PROGRAM: error: …` on stderr and failure.
pub fn exit_code(program: &str, result: anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("{program}: error: {}", Chain(err.as_ref()));
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("reading {path}: {source}")]
    struct Wraps {
        path: &'static str,
        source: std::io::Error,
    }

    #[test]
    fn a_cause_already_in_the_message_is_said_once() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
        let err = anyhow::Error::new(Wraps {
            path: "/x.json",
            source: io,
        })
        .context("loading the description");
        assert_eq!(
            Chain(err.as_ref()).to_string(),
            "loading the description: reading /x.json: no such file"
        );
        // anyhow's own `{:#}` says the cause twice: what Chain is for.
        assert_eq!(format!("{err:#}").matches("no such file").count(), 2);
    }

    #[test]
    fn causes_not_in_the_message_are_chained() {
        let err = anyhow::anyhow!("connection refused")
            .context("cannot connect")
            .context("following 10.0.0.2:7447");
        assert_eq!(
            Chain(err.as_ref()).to_string(),
            "following 10.0.0.2:7447: cannot connect: connection refused"
        );
    }
}
