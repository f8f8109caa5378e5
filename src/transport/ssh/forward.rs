//! Port forwards: a server on the host's loopback reached through the SSH master.

use anyhow::{Context, Result};
use openssh::{ForwardType, Socket};

use super::SshTransport;
use crate::transport::{http_client, HttpEndpoint};

impl SshTransport {
    /// Forwards a Unix socket in the control directory to the server's address on the host, and
    /// returns a client bound to that socket (the URL, and so the Host header, stay unchanged).
    pub async fn http_endpoint(&self, url: &str) -> Result<HttpEndpoint> {
        let parsed = reqwest::Url::parse(url).with_context(|| format!("`{url}` is not a URL"))?;
        let host = parsed.host_str().context("the URL has no host")?.to_string();
        let port = parsed.port_or_known_default().context("the URL has no port")?;
        let socket_path = self.master.forward_socket();
        let session = self.session().await?;
        session
            .request_port_forward(
                ForwardType::Local,
                Socket::UnixSocket {
                    path: socket_path.clone().into(),
                },
                Socket::TcpSocket {
                    host: host.clone().into(),
                    port,
                },
            )
            .await
            .with_context(|| format!("cannot forward to {host}:{port} on {} through SSH", self.host))?;
        let client = http_client(|builder| builder.unix_socket(socket_path.clone()))?;
        Ok(HttpEndpoint {
            client,
            base_url: url.to_string(),
            bridge: None,
        })
    }
}
