//! The store clients against real loopback servers: how each way an RPC
//! can fail is classified (unary, typed and batched paths), the RPC
//! timeout, stream resets, and the BatchCommands transport.

mod batch_commands;
mod net;
mod rpc_timeout;
mod stream_reset;
mod transport_classes;
mod typed_call;
