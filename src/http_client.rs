//! HTTP as every client in rigrun speaks it (the load generator, verify-server with its smoke
//! request, the server's facts): a pooled connection, a request sent again on a fresh
//! connection when the server had already closed the pooled one, and errors in the user's terms.
//!
//! Why pool at all: a new connection per request puts a TCP handshake (and, for https, a TLS
//! one) into every request's time to first token, and at thousands of requests a second it
//! costs the client CPU that the measurement needs. Why resend: servers close connections
//! without saying so first. llama.cpp's server closes the connection right after every streamed
//! response whose head promised `Keep-Alive: timeout=5, max=100` (measured on its 11434 build;
//! whole responses are kept), and uvicorn (vLLM, SGLang) closes connections
//! idle for its keep-alive timeout (5 s by default). A request written in the instant before the
//! server's FIN arrives fails with "connection closed before message completed", although the
//! server never answered it: such a request, and only such a one, is sent once more on a
//! connection opened for it, and counted as a reconnect rather than as a failure.

use anyhow::Result;

/// A pooled client and, for resending, one that opens a new connection per request.
#[derive(Clone)]
pub struct Client {
    pooled: reqwest::Client,
    fresh: reqwest::Client,
}

/// How a request went: the server's answer (or why there was none) and how many times it was
/// sent again because a reused connection turned out to be closed.
pub struct Sent {
    pub result: Result<reqwest::Response, reqwest::Error>,
    pub reconnects: u32,
}

impl Client {
    /// Builds both clients from `settings`, which is given a builder with rigrun's defaults
    /// (no proxy: servers sit on the host's loopback) and adds the caller's.
    pub fn new(settings: impl Fn(reqwest::ClientBuilder) -> reqwest::ClientBuilder) -> Result<Client> {
        crate::install_crypto_provider();
        let builder = || settings(reqwest::Client::builder().no_proxy());
        Ok(Client {
            pooled: builder().build()?,
            fresh: builder().pool_max_idle_per_host(0).build()?,
        })
    }

    /// Sends the request that `request` builds on the pooled client; if the server closed that
    /// connection before answering, builds it again on a fresh connection and sends it once more.
    pub async fn send(&self, request: impl Fn(&reqwest::Client) -> reqwest::RequestBuilder) -> Sent {
        match request(&self.pooled).send().await {
            Err(e) if closed_unanswered(&e) => Sent {
                result: request(&self.fresh).send().await,
                reconnects: 1,
            },
            result => Sent {
                result,
                reconnects: 0,
            },
        }
    }
}

/// Whether `err` says the connection closed after the request went out and before any answer:
/// the mark of a pooled connection that the server had already let go.
pub fn closed_unanswered(err: &reqwest::Error) -> bool {
    if err.is_connect() || err.is_timeout() || err.is_status() {
        return false;
    }
    causes(err).any(|cause| {
        if let Some(e) = cause.downcast_ref::<hyper::Error>() {
            return e.is_incomplete_message() || e.is_canceled();
        }
        cause.downcast_ref::<std::io::Error>().is_some_and(|e| {
            use std::io::ErrorKind::*;
            matches!(e.kind(), ConnectionReset | ConnectionAborted | BrokenPipe)
        })
    })
}

/// The error's causes, outermost first, without the error itself.
fn causes(err: &reqwest::Error) -> impl Iterator<Item = &(dyn std::error::Error + 'static)> {
    std::iter::successors(std::error::Error::source(err), |e| e.source())
}

/// A reqwest error with its causes, in the user's terms.
pub fn explain(err: &reqwest::Error) -> String {
    let chain = causes(err)
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(": ");
    if err.is_timeout() {
        "no answer in time (timed out)".into()
    } else if err.is_connect() {
        format!("connection refused or unreachable ({chain}); is the server running and listening there?")
    } else if closed_unanswered(err) {
        format!(
            "the connection was closed before an answer ({chain}); is the server listening on that address?"
        )
    } else if chain.is_empty() {
        err.to_string()
    } else {
        format!("{err}: {chain}")
    }
}

/// At most 200 characters of a body, on one line, for messages.
pub fn excerpt(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let text = text.trim().replace(['\n', '\r'], " ");
    if text.chars().count() > 200 {
        format!("{}…", text.chars().take(200).collect::<String>())
    } else if text.is_empty() {
        "(empty body)".into()
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    use super::*;

    /// Reads one bodiless request up to the end of its head.
    async fn read_request(conn: &mut TcpStream) {
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            assert_eq!(
                conn.read(&mut byte).await.unwrap(),
                1,
                "the client hung up mid-request"
            );
            head.push(byte[0]);
        }
    }

    async fn answer(conn: &mut TcpStream, body: &str) {
        let reply = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{body}", body.len());
        conn.write_all(reply.as_bytes()).await.unwrap();
    }

    async fn get(client: &Client, url: &str) -> (Result<String, String>, u32) {
        let sent = client.send(|c| c.get(url)).await;
        let result = match sent.result {
            Ok(reply) => Ok(reply.text().await.unwrap()),
            Err(e) => Err(explain(&e)),
        };
        (result, sent.reconnects)
    }

    #[tokio::test]
    async fn a_request_the_server_closed_unanswered_is_sent_once_more_on_a_new_connection() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/", listener.local_addr().unwrap());
        let server = tokio::spawn(async move {
            // Keep-alive for one answer, then the next request is read and left unanswered:
            // what llama.cpp's server does to a client that reuses it after a stream.
            let (mut first, _) = listener.accept().await.unwrap();
            read_request(&mut first).await;
            answer(&mut first, "one").await;
            read_request(&mut first).await;
            drop(first);
            let (mut second, _) = listener.accept().await.unwrap();
            read_request(&mut second).await;
            answer(&mut second, "two").await;
            // A server that drops every request, on new connections too.
            for _ in 0..2 {
                let (mut conn, _) = listener.accept().await.unwrap();
                read_request(&mut conn).await;
            }
        });
        let client = Client::new(|b| b).unwrap();
        assert_eq!(get(&client, &url).await, (Ok("one".into()), 0));
        assert_eq!(get(&client, &url).await, (Ok("two".into()), 1));
        let (result, reconnects) = get(&client, &url).await;
        let error = result.unwrap_err();
        assert!(error.contains("closed before an answer"), "{error}");
        assert_eq!(reconnects, 1, "resent once, not more");
        server.await.unwrap();
    }

    #[tokio::test]
    async fn a_refused_connection_is_not_resent() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/", listener.local_addr().unwrap());
        drop(listener);
        let (result, reconnects) = get(&Client::new(|b| b).unwrap(), &url).await;
        assert!(result.unwrap_err().contains("refused or unreachable"));
        assert_eq!(reconnects, 0);
    }

    #[test]
    fn excerpts_are_one_short_line() {
        assert_eq!(excerpt(b"  a\nb\r\n"), "a b");
        assert_eq!(excerpt(b""), "(empty body)");
        let long = "x".repeat(300);
        assert_eq!(excerpt(long.as_bytes()).chars().count(), 201);
    }
}
