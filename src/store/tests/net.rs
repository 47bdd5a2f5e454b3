//! Socket helpers shared by the connection and classification tests (real
//! loopback sockets only).

#![allow(dead_code)]

use std::time::Duration;

use tokio::net::{TcpListener, TcpSocket, TcpStream};

/// A listener with backlog 0 whose accept queue is full, so a further
/// connect gets no SYN-ACK and hangs. Returns the listener, the connections
/// that filled the queue (keep both alive for the test), and the address.
pub async fn hanging_listener() -> (TcpListener, Vec<TcpStream>, String) {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(0).unwrap();
    let address = listener.local_addr().unwrap();
    let mut held = Vec::new();
    for _ in 0..8 {
        match tokio::time::timeout(Duration::from_millis(200), TcpStream::connect(address)).await {
            Ok(Ok(stream)) => held.push(stream),
            Ok(Err(e)) => panic!("filling the accept queue failed: {e}"),
            // This connect hung: the queue is full.
            Err(_) => return (listener, held, address.to_string()),
        }
    }
    panic!("the accept queue of a backlog-0 listener never filled");
}
