//! A port for a server to listen on: free on every local address, in both
//! families, at the moment it is chosen.

use anyhow::{bail, Context, Result};

use crate::bench::servers::procfs;

/// A port nobody listens on right now, and that a server could bind on any
/// local address. Another process could still take it before the server
/// binds; [`RunningServer::wait_listening`](crate::bench::servers::launch::RunningServer::wait_listening) then refuses to mistake that
/// process for the server, because it checks socket ownership.
pub fn free_port() -> Result<u16> {
    for _ in 0..64 {
        let l = std::net::TcpListener::bind("127.0.0.1:0").context("binding a probe port")?;
        let port = l.local_addr()?.port();
        drop(l);
        if procfs::listening_on_port(port).is_empty() && bindable_everywhere(port) {
            return Ok(port);
        }
    }
    bail!("no free TCP port found on 127.0.0.1")
}

/// Whether `port` is free on every local address, in both families. A
/// port free on 127.0.0.1 can still be held on ::1 by one of the load
/// generator's own client sockets (or its TIME_WAIT), and a server on
/// [::1] then fails to bind it even with SO_REUSEADDR: a CI run lost a
/// run's A/A twin that way. A wildcard dual-stack bind conflicts with
/// every socket on the port.
fn bindable_everywhere(port: u16) -> bool {
    std::net::TcpListener::bind(("::", port))
        .or_else(|_| std::net::TcpListener::bind(("0.0.0.0", port)))
        .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_a_client_holds_on_ipv6_loopback_is_not_free() {
        let server = std::net::TcpListener::bind("[::1]:0").unwrap();
        let client = std::net::TcpStream::connect(server.local_addr().unwrap()).unwrap();
        let held = client.local_addr().unwrap().port();
        assert!(procfs::listening_on_port(held).is_empty());
        assert!(
            !bindable_everywhere(held),
            "port {held} is held by a client"
        );
        drop(client);
        drop(server);
        let idle = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = idle.local_addr().unwrap().port();
        drop(idle);
        assert!(bindable_everywhere(port));
    }
}
