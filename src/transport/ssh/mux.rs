//! What rigrun says to a ControlMaster over its control socket itself, in OpenSSH's mux
//! protocol (PROTOCOL.mux), where openssh's client has no call for it: each an `ssh` process
//! fewer.

use std::path::Path;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::UnixStream;

/// Asks the master behind `control` to exit, as `ssh -O exit` does (OpenSSH's PROTOCOL.mux: a
/// hello each way, then MUX_C_TERMINATE, answered by MUX_S_OK) without starting an `ssh`,
/// which costs a host's close ~5 ms.
pub(super) async fn terminate(control: &Path) -> std::io::Result<()> {
    const HELLO: u32 = 0x0000_0001;
    const VERSION: u32 = 4;
    const TERMINATE: u32 = 0x1000_0005;
    const OK: u32 = 0x8000_0001;
    let mut socket = UnixStream::connect(control).await?;
    write_mux(&mut socket, &[HELLO, VERSION]).await?;
    let hello = read_mux(&mut socket).await?;
    if hello.get(..4) != Some(&HELLO.to_be_bytes()[..]) {
        return Err(std::io::Error::other("the control socket did not say hello"));
    }
    let request_id = 1;
    write_mux(&mut socket, &[TERMINATE, request_id]).await?;
    match read_mux(&mut socket).await {
        Ok(reply) if reply.get(..8) == Some(&[OK.to_be_bytes(), request_id.to_be_bytes()].concat()[..]) => {
            Ok(())
        }
        // The master often exits before its answer leaves (OpenSSH's mux.c says so).
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(()),
        Ok(_) => Err(std::io::Error::other("the master refused to exit")),
        Err(e) => Err(e),
    }
}

/// Writes one mux message made of `words` (each a big-endian u32), behind its length.
async fn write_mux(socket: &mut UnixStream, words: &[u32]) -> std::io::Result<()> {
    let mut message = ((words.len() * 4) as u32).to_be_bytes().to_vec();
    message.extend(words.iter().flat_map(|w| w.to_be_bytes()));
    socket.write_all(&message).await
}

/// Reads one mux message (what follows its length); at most 64 KiB.
async fn read_mux(socket: &mut UnixStream) -> std::io::Result<Vec<u8>> {
    let len = socket.read_u32().await? as usize;
    if len > 64 * 1024 {
        return Err(std::io::Error::other(format!("a mux message of {len} bytes")));
    }
    let mut body = vec![0; len];
    socket.read_exact(&mut body).await?;
    Ok(body)
}
