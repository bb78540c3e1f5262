//! The control socket: one JSON request per line in, one JSON response
//! per line out (see `tierfs_core::report`). Served by a small tokio
//! runtime on its own thread, so it never competes with file system
//! requests for their threads.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tierfs_core::report::{Request, Response};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixListener;

/// Answers requests; implemented by the mount for its engine.
pub trait Handler: Send + Sync + 'static {
    /// One request, one response.
    fn handle(&self, req: Request) -> Response;
}

/// A listener the server threads accept connections from.
pub(crate) trait Listener: Send + 'static {
    /// A connection.
    type Conn: Send + 'static;
    /// The next connection.
    fn next_conn(&self) -> impl Future<Output = std::io::Result<Self::Conn>> + Send + '_;
}

impl Listener for UnixListener {
    type Conn = tokio::net::UnixStream;
    async fn next_conn(&self) -> std::io::Result<Self::Conn> {
        self.accept().await.map(|(s, _)| s)
    }
}

impl Listener for tokio::net::TcpListener {
    type Conn = tokio::net::TcpStream;
    async fn next_conn(&self) -> std::io::Result<Self::Conn> {
        self.accept().await.map(|(s, _)| s)
    }
}

/// Connections a server thread serves at once.
const MAX_CONNECTIONS: usize = 8;

/// The pause after a failed accept.
const ACCEPT_BACKOFF: std::time::Duration = std::time::Duration::from_millis(100);

/// A server on a thread of its own, running `rt` (a current-thread
/// runtime with I/O and time): each connection `listener` accepts is
/// served by a task of `serve`, until the server is dropped, which stops
/// and joins it.
pub(crate) struct ServerThread {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ServerThread {
    pub(crate) fn spawn<L: Listener, F: Future<Output = ()> + Send + 'static>(
        name: &str,
        rt: tokio::runtime::Runtime,
        listener: L,
        serve: impl Fn(L::Conn) -> F + Send + 'static,
    ) -> std::io::Result<Self> {
        let (tx, mut rx) = tokio::sync::oneshot::channel::<()>();
        let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
        let thread = std::thread::Builder::new().name(name.into()).spawn(move || {
            rt.block_on(async move {
                loop {
                    // At most MAX_CONNECTIONS at once: a flood of clients
                    // must not take the descriptors the file system needs.
                    let slot = tokio::select! {
                        _ = &mut rx => break,
                        slot = slots.clone().acquire_owned() => slot,
                    };
                    let Ok(slot) = slot else { break };
                    tokio::select! {
                        _ = &mut rx => break,
                        acc = listener.next_conn() => match acc {
                            Ok(conn) => {
                                let done = serve(conn);
                                tokio::spawn(async move {
                                    done.await;
                                    drop(slot);
                                });
                            }
                            // Out of descriptors, say: not a busy loop.
                            Err(_) => tokio::time::sleep(ACCEPT_BACKOFF).await,
                        }
                    }
                }
            });
            // A connection's task still running does not hold up the
            // unmount.
            rt.shutdown_timeout(std::time::Duration::from_secs(1));
        })?;
        Ok(ServerThread { stop: Some(tx), thread: Some(thread) })
    }
}

impl Drop for ServerThread {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A running control server; stops and removes its socket on drop.
pub struct ControlServer {
    path: PathBuf,
    server: Option<ServerThread>,
}

impl ControlServer {
    /// Listens on `path` (replacing a stale socket), owner-only.
    pub fn start(path: &Path, handler: Arc<dyn Handler>) -> std::io::Result<Self> {
        if let Some(d) = path.parent() {
            crate::runtime::private_dir(d)?;
        }
        let _ = std::fs::remove_file(path);
        let rt = tokio::runtime::Builder::new_current_thread().enable_io().enable_time().build()?;
        let listener = {
            let _g = rt.enter();
            UnixListener::bind(path)?
        };
        std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
        let server = ServerThread::spawn("tierfs-control", rt, listener, move |c| serve_conn(c, handler.clone()))?;
        Ok(ControlServer { path: path.to_path_buf(), server: Some(server) })
    }
}

async fn serve_conn(stream: tokio::net::UnixStream, h: Arc<dyn Handler>) {
    let (r, mut w) = stream.into_split();
    let mut lines = BufReader::new(r).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let resp = match serde_json::from_str::<Request>(&line) {
            Ok(req) => h.handle(req),
            Err(e) => Response::Error(format!("bad request: {e}")),
        };
        let mut out = serde_json::to_string(&resp).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"));
        out.push('\n');
        if w.write_all(out.as_bytes()).await.is_err() {
            break;
        }
    }
}

impl Drop for ControlServer {
    fn drop(&mut self) {
        // Stopped first, then the socket goes.
        drop(self.server.take());
        let _ = std::fs::remove_file(&self.path);
    }
}
