//! The control socket: a Unix stream socket (mode 0600) on which the
//! receiver agent answers one line-delimited JSON request, `{"get":"status"}`,
//! with the [`Status`] as one JSON line, then closes. Both ends are here so
//! they cannot drift apart: [`ControlSocket`] and [`serve`] for the agent,
//! [`request_status`] for `srap status`.
//!
//! The socket file is made under a temporary name, restricted to 0600 and
//! renamed into place, so it is never reachable with looser permissions. A
//! file left by a dead agent (nobody accepts on it) is replaced; a live agent
//! on the path is an error; the file is removed on exit only if it is still
//! ours.

use std::{
    io::{self, BufRead as _, BufReader, Read as _, Write as _},
    os::unix::fs::{FileTypeExt as _, MetadataExt as _, PermissionsExt as _},
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use serde::{Deserialize, Serialize};
use thiserror::Error;
use tokio::{
    io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _},
    net::{UnixListener, UnixStream},
    sync::watch,
};
use tracing::warn;

use crate::{
    bounded::{self, Bounds},
    sender::SenderStatus,
    snapshot::Status,
};

/// Where the receiver agent listens unless told otherwise (`--control`).
pub const DEFAULT_CONTROL_PATH: &str = "/run/srap/receiver.sock";
/// Longest request line accepted.
const MAX_REQUEST: u64 = 4096;
/// Longest reply a client reads (a status with tens of thousands of flows).
const MAX_REPLY: u64 = 64 << 20;
/// Clients served at once (more wait in the kernel's backlog), and how long
/// one has to send its request and take the reply.
const BOUNDS: Bounds = Bounds {
    name: "control socket",
    at_once: 16,
    deadline: Duration::from_secs(5),
};

/// A request on the control socket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Request {
    /// What is asked for; only `status` is known.
    pub get: String,
}

/// The reply to a request the agent cannot answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ErrorReply {
    pub error: String,
}

#[derive(Debug, Error)]
pub enum ControlError {
    #[error(
        "no control socket at {0}: is the receiver agent running? Start it with \
         `srap-agent receiver --iface DEV --listen ADDR` (one started with `--control PATH` \
         is read with `srap status --control PATH`)"
    )]
    Missing(PathBuf),
    #[error(
        "nothing answers on {0}: the receiver agent that made it has stopped; start \
         `srap-agent receiver --iface DEV --listen ADDR` again"
    )]
    Stale(PathBuf),
    #[error(
        "no control socket at {0}: is the sender agent running? Start it with \
         `srap-agent sender --peer HOST:PORT` (one started with `--control PATH` is read \
         with `srap status --sender --control PATH`)"
    )]
    MissingSender(PathBuf),
    #[error(
        "nothing answers on {0}: the sender agent that made it has stopped; start \
         `srap-agent sender --peer HOST:PORT` again"
    )]
    StaleSender(PathBuf),
    #[error("{0}: permission denied (the control socket is root's, mode 0600: run as root)")]
    Denied(PathBuf),
    #[error("another agent is already serving {0}; stop it or pass another --control")]
    InUse(PathBuf),
    #[error("{0} exists and is not a socket; not replacing it")]
    NotASocket(PathBuf),
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("{path}: the agent answered with something that is not a status: {detail}")]
    BadReply { path: PathBuf, detail: String },
    #[error("{path}: the agent refused the request: {reason}")]
    Refused { path: PathBuf, reason: String },
}

/// Why the agent answers a request with an [`ErrorReply`].
#[derive(Debug, Error)]
enum RequestError {
    #[error(
        "send one JSON request on one line (at most {MAX_REQUEST} bytes), e.g. {{\"get\":\"status\"}}"
    )]
    NotOneLine,
    #[error("not a request ({0}); try {{\"get\":\"status\"}}")]
    NotARequest(#[source] serde_json::Error),
    #[error("unknown request `{0}`: only {{\"get\":\"status\"}} is answered")]
    Unknown(String),
    #[error("internal error: {0}")]
    Internal(#[source] serde_json::Error),
}

fn io_error(path: &Path) -> impl FnOnce(io::Error) -> ControlError + '_ {
    move |source| ControlError::Io {
        path: path.to_owned(),
        source,
    }
}

/// The agent's end: the socket file, removed on drop if still ours.
#[derive(Debug)]
pub struct ControlSocket {
    path: PathBuf,
    /// (device, inode) of the file we made.
    identity: (u64, u64),
}

impl ControlSocket {
    /// Makes the socket at `path` (creating its directory) and returns the
    /// listener. Needs a tokio runtime.
    pub fn bind(path: &Path) -> Result<(Self, UnixListener), ControlError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(io_error(dir))?;
        }
        match std::fs::symlink_metadata(path) {
            Ok(meta) if !meta.file_type().is_socket() => {
                return Err(ControlError::NotASocket(path.to_owned()));
            }
            Ok(_) => match std::os::unix::net::UnixStream::connect(path) {
                Ok(_) => return Err(ControlError::InUse(path.to_owned())),
                Err(err) if err.kind() == io::ErrorKind::ConnectionRefused => {
                    warn!("replacing the stale control socket {}", path.display());
                    std::fs::remove_file(path).map_err(io_error(path))?;
                }
                Err(err) => return Err(io_error(path)(err)),
            },
            Err(err) if err.kind() == io::ErrorKind::NotFound => {}
            Err(err) => return Err(io_error(path)(err)),
        }
        let mut staging = path.as_os_str().to_owned();
        staging.push(format!(".{}.tmp", std::process::id()));
        let staging = PathBuf::from(staging);
        let _ = std::fs::remove_file(&staging);
        let listener =
            std::os::unix::net::UnixListener::bind(&staging).map_err(io_error(&staging))?;
        let placed = std::fs::set_permissions(&staging, std::fs::Permissions::from_mode(0o600))
            .and_then(|()| std::fs::rename(&staging, path));
        if let Err(err) = placed {
            let _ = std::fs::remove_file(&staging);
            return Err(io_error(path)(err));
        }
        let meta = std::fs::symlink_metadata(path).map_err(io_error(path))?;
        listener.set_nonblocking(true).map_err(io_error(path))?;
        let listener = UnixListener::from_std(listener).map_err(io_error(path))?;
        Ok((
            Self {
                path: path.to_owned(),
                identity: (meta.dev(), meta.ino()),
            },
            listener,
        ))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for ControlSocket {
    fn drop(&mut self) {
        // Another agent may have replaced a file it thought stale: leave theirs.
        let ours = std::fs::symlink_metadata(&self.path)
            .is_ok_and(|meta| (meta.dev(), meta.ino()) == self.identity);
        if ours && let Err(err) = std::fs::remove_file(&self.path) {
            warn!("removing {}: {err}", self.path.display());
        }
    }
}

/// Answers clients on `listener` with the latest status (the receiver's
/// [`Status`] or the sender's [`SenderStatus`]), until the task is
/// dropped or aborted.
pub async fn serve<T>(listener: UnixListener, status: watch::Receiver<Arc<T>>)
where
    T: Serialize + Send + Sync + 'static,
{
    bounded::serve_latest(listener, BOUNDS, status, |stream, status| async move {
        answer(stream, &status).await
    })
    .await;
}

async fn answer<T: Serialize>(
    stream: UnixStream,
    status: &watch::Receiver<Arc<T>>,
) -> io::Result<()> {
    let (rd, mut wr) = stream.into_split();
    let mut line = String::new();
    tokio::io::BufReader::new(rd.take(MAX_REQUEST))
        .read_line(&mut line)
        .await?;
    let reply = reply_to(&line, status).unwrap_or_else(|refusal| error_reply(&refusal));
    wr.write_all(reply.as_bytes()).await?;
    wr.shutdown().await
}

/// The status line for the request `line`, or why there is none.
fn reply_to<T: Serialize>(
    line: &str,
    status: &watch::Receiver<Arc<T>>,
) -> Result<String, RequestError> {
    if !line.ends_with('\n') {
        return Err(RequestError::NotOneLine);
    }
    let request: Request = serde_json::from_str(line.trim()).map_err(RequestError::NotARequest)?;
    if request.get != "status" {
        return Err(RequestError::Unknown(request.get));
    }
    let current = Arc::clone(&status.borrow());
    serde_json::to_string(&*current)
        .map(|s| s + "\n")
        .map_err(RequestError::Internal)
}

/// The [`ErrorReply`] line saying why a request is not answered.
fn error_reply(refusal: &RequestError) -> String {
    let reply = ErrorReply {
        error: refusal.to_string(),
    };
    serde_json::to_string(&reply).map_or_else(|_| "{}\n".to_owned(), |s| s + "\n")
}

/// The client's end: asks the receiver agent at `path` for its status
/// (blocking), and returns it with the JSON line it came as.
pub fn request_status(path: &Path) -> Result<(Status, String), ControlError> {
    request(path, ControlError::Missing, ControlError::Stale)
}

/// [`request_status`] of the sender agent (`srap status --sender`).
pub fn request_sender_status(path: &Path) -> Result<(SenderStatus, String), ControlError> {
    request(path, ControlError::MissingSender, ControlError::StaleSender)
}

fn request<T: serde::de::DeserializeOwned>(
    path: &Path,
    missing: fn(PathBuf) -> ControlError,
    stale: fn(PathBuf) -> ControlError,
) -> Result<(T, String), ControlError> {
    let mut stream =
        std::os::unix::net::UnixStream::connect(path).map_err(|err| match err.kind() {
            io::ErrorKind::NotFound => missing(path.to_owned()),
            io::ErrorKind::ConnectionRefused => stale(path.to_owned()),
            io::ErrorKind::PermissionDenied => ControlError::Denied(path.to_owned()),
            _ => io_error(path)(err),
        })?;
    stream
        .set_read_timeout(Some(BOUNDS.deadline))
        .and_then(|()| stream.set_write_timeout(Some(BOUNDS.deadline)))
        .map_err(io_error(path))?;
    let request = Request {
        get: "status".into(),
    };
    let mut line = serde_json::to_string(&request).unwrap_or_default();
    line.push('\n');
    stream.write_all(line.as_bytes()).map_err(io_error(path))?;
    let mut reply = String::new();
    BufReader::new(stream.take(MAX_REPLY))
        .read_line(&mut reply)
        .map_err(io_error(path))?;
    let reply = reply.trim_end().to_owned();
    if let Ok(refused) = serde_json::from_str::<ErrorReply>(&reply) {
        return Err(ControlError::Refused {
            path: path.to_owned(),
            reason: refused.error,
        });
    }
    let status = serde_json::from_str(&reply).map_err(|err| ControlError::BadReply {
        path: path.to_owned(),
        detail: if reply.is_empty() {
            "an empty reply".into()
        } else {
            err.to_string()
        },
    })?;
    Ok((status, reply))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_path(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("srap-ctl-{}-{name}", std::process::id()))
    }

    fn sample_status() -> Status {
        Status {
            iface: "vrx".into(),
            rss_version: 7,
            ..Status::default()
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn answers_status_and_refuses_the_rest() {
        let dir = temp_path("serve");
        let path = dir.join("receiver.sock");
        let (socket, listener) = ControlSocket::bind(&path).expect("bind");
        let mode = std::fs::metadata(&path).expect("exists").mode() & 0o777;
        assert_eq!(mode, 0o600);
        let (_tx, rx) = watch::channel(Arc::new(sample_status()));
        let server = tokio::spawn(serve(listener, rx));

        let asked = path.clone();
        let (status, line) = tokio::task::spawn_blocking(move || request_status(&asked))
            .await
            .expect("join")
            .expect("status");
        assert_eq!(status, sample_status());
        assert!(line.starts_with('{') && !line.contains('\n'));

        for (request, expect) in [
            ("{\"get\":\"flows\"}\n", "unknown request `flows`"),
            ("hello\n", "not a request"),
            ("{\"get\":\"status\"}", "on one line"),
        ] {
            let mut stream = UnixStream::connect(&path).await.expect("connect");
            stream.write_all(request.as_bytes()).await.expect("send");
            stream.shutdown().await.expect("FIN");
            let mut reply = String::new();
            stream.read_to_string(&mut reply).await.expect("reply");
            let reply: ErrorReply = serde_json::from_str(reply.trim()).expect("error reply");
            assert!(reply.error.contains(expect), "{request:?}: {}", reply.error);
        }

        // A second agent on the same path is refused while the first lives.
        let err = ControlSocket::bind(&path).expect_err("in use");
        assert!(matches!(err, ControlError::InUse(_)), "{err}");
        server.abort();
        let _ = server.await;
        drop(socket);
        assert!(!path.exists(), "removed on drop");
        let _ = std::fs::remove_dir(&dir);
    }

    #[tokio::test]
    async fn a_stale_socket_is_replaced_and_other_files_are_not() {
        let dir = temp_path("stale");
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("receiver.sock");
        // A socket nobody accepts on any more.
        drop(std::os::unix::net::UnixListener::bind(&path).expect("bind"));
        assert!(matches!(request_status(&path), Err(ControlError::Stale(_))));
        let (socket, _listener) = ControlSocket::bind(&path).expect("replaces the stale one");
        drop(socket);

        std::fs::write(&path, "not a socket").expect("write");
        let err = ControlSocket::bind(&path).expect_err("refused");
        assert!(matches!(err, ControlError::NotASocket(_)), "{err}");
        std::fs::remove_file(&path).expect("cleanup");

        let err = request_status(&path).expect_err("missing");
        assert!(matches!(err, ControlError::Missing(_)));
        let text = err.to_string();
        assert!(text.contains(&path.display().to_string()) && text.contains("srap-agent receiver"));
        let _ = std::fs::remove_dir(&dir);
    }
}
