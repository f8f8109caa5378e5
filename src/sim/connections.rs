//! Accepting and serving connections (HTTP/1.1, keep-alive), and, when asked, closing them the
//! way real servers surprise clients that reuse connections: after each response without a
//! `Connection: close` first (llama.cpp's server after a streamed response), or once idle for a
//! while without notice (uvicorn, under vLLM and SGLang, after its keep-alive timeout).

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{Request, Response};
use axum::Router;
use http_body::{Frame, SizeHint};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc::{unbounded_channel, UnboundedSender};
use tokio::time::Instant;

/// How connections end besides the client closing them.
#[derive(Debug, Clone, Copy, Default)]
pub struct Closing {
    /// Close each connection once its response is written, without saying so in its head.
    pub after_response: bool,
    /// Close a connection that has had no request in flight for this long.
    pub when_idle: Option<Duration>,
}

/// Serves `app` on every connection `listener` accepts, until the task is dropped.
pub async fn serve(listener: TcpListener, app: Router, closing: Closing) {
    loop {
        match listener.accept().await {
            Ok((tcp, _)) => {
                tokio::spawn(connection(tcp, app.clone(), closing));
            }
            // Out of file descriptors or memory: let in-flight requests finish and free some.
            Err(e) if !per_connection(&e) => {
                eprintln!("rigrun sim: cannot accept a connection: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(_) => {}
        }
    }
}

/// Accept errors that concern one connection only (the client gave up before it was accepted).
fn per_connection(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(e.kind(), ConnectionAborted | ConnectionReset | Interrupted)
}

/// A request starting or a response finished, as seen by its connection.
enum Activity {
    Started,
    Finished,
}

/// Serves one connection, closing it early as `closing` says.
async fn connection(tcp: TcpStream, app: Router, closing: Closing) {
    // Small SSE writes must not wait for Nagle's algorithm.
    let _ = tcp.set_nodelay(true);
    let (activity, mut events) = unbounded_channel();
    let app = TowerToHyperService::new(app);
    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
        let _ = activity.send(Activity::Started);
        let watch = activity.clone();
        let call = hyper::service::Service::call(&app, request);
        async move {
            let response: Response<Body> = call.await?;
            Ok::<_, Infallible>(response.map(|body| Body::new(Watched { body, done: watch })))
        }
    });
    let conn = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(tcp), service);
    let mut conn = std::pin::pin!(conn);
    let (mut in_flight, mut idle_since, mut closing_now) = (0u32, Instant::now(), false);
    loop {
        let idle_deadline = closing.when_idle.map(|idle| idle_since + idle);
        tokio::select! {
            _ = conn.as_mut() => return,
            Some(event) = events.recv() => match event {
                Activity::Started => in_flight += 1,
                Activity::Finished => {
                    in_flight = in_flight.saturating_sub(1);
                    idle_since = Instant::now();
                    if closing.after_response && !closing_now {
                        // The head went out with keep-alive; close once the body is written.
                        conn.as_mut().graceful_shutdown();
                        closing_now = true;
                    }
                }
            },
            _ = sleep_until(idle_deadline), if in_flight == 0 && !closing_now => {
                conn.as_mut().graceful_shutdown();
                closing_now = true;
            }
        }
    }
}

/// Sleeps until `deadline`, or for ever without one.
async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// A response body that tells its connection when it is done with (written or abandoned):
/// hyper drops a body as soon as its last frame is taken, after the head was encoded.
struct Watched {
    body: Body,
    done: UnboundedSender<Activity>,
}

impl Drop for Watched {
    fn drop(&mut self) {
        let _ = self.done.send(Activity::Finished);
    }
}

impl http_body::Body for Watched {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
