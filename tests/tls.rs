//! TLS and mutual TLS over real sockets on 127.0.0.1: certificates are made
//! on the fly with rcgen, the server is a tonic server requiring a client
//! certificate signed by the same CA.

// A tonic server (the server stubs of tikv-plan-proto's `server` feature).

use std::io::Write;
use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use tikv_plan::proto::kvrpcpb;
use tikv_plan::proto::tikvpb::tikv_client::TikvClient;
use tikv_plan::Failure;
use tikv_plan::SecurityConfig;
use tikv_plan::SecurityManager;
use tonic::transport::{Certificate, Identity, Server, ServerTlsConfig};

struct Pki {
    ca_pem: String,
    server: (String, String),
    client: (String, String),
}

fn make_pki() -> Pki {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let leaf = |name: &str| {
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(vec![name.to_owned()])
            .unwrap()
            .signed_by(&key, &issuer)
            .unwrap();
        (cert.pem(), key.serialize_pem())
    };
    Pki {
        ca_pem: ca_cert.pem(),
        server: leaf("127.0.0.1"),
        client: leaf("client"),
    }
}

fn write(dir: &tempfile::TempDir, name: &str, contents: &str) -> std::path::PathBuf {
    let path = dir.path().join(name);
    std::fs::File::create(&path)
        .unwrap()
        .write_all(contents.as_bytes())
        .unwrap();
    path
}

/// Starts a tonic server with mutual TLS and no services (every RPC answers
/// `Unimplemented`), returning its address.
async fn start_server(pki: &Pki) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let tls = ServerTlsConfig::new()
        .identity(Identity::from_pem(&pki.server.0, &pki.server.1))
        .client_ca_root(Certificate::from_pem(&pki.ca_pem));
    let router = Server::builder()
        .tls_config(tls)
        .unwrap()
        .add_optional_service::<tikv_plan::proto::tikvpb::tikv_server::TikvServer<NoTikv>>(
        None,
    );
    tokio::spawn(
        router.serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    addr.to_string()
}

/// Never instantiated: only names a service type for `add_optional_service`.
struct NoTikv;

macro_rules! unimplemented_methods {
    ($($name:ident($req:ty) -> $resp:ty;)*) => {
        #[tonic::async_trait]
        impl tikv_plan::proto::tikvpb::tikv_server::Tikv for NoTikv {
            $(async fn $name(&self, _r: tonic::Request<$req>) -> Result<tonic::Response<$resp>, tonic::Status> {
                Err(tonic::Status::unimplemented("test server"))
            })*
        }
    };
}

unimplemented_methods! {
    raw_get(kvrpcpb::RawGetRequest) -> kvrpcpb::RawGetResponse;
    raw_batch_get(kvrpcpb::RawBatchGetRequest) -> kvrpcpb::RawBatchGetResponse;
    raw_put(kvrpcpb::RawPutRequest) -> kvrpcpb::RawPutResponse;
    raw_batch_put(kvrpcpb::RawBatchPutRequest) -> kvrpcpb::RawBatchPutResponse;
    raw_delete(kvrpcpb::RawDeleteRequest) -> kvrpcpb::RawDeleteResponse;
    raw_batch_delete(kvrpcpb::RawBatchDeleteRequest) -> kvrpcpb::RawBatchDeleteResponse;
    raw_scan(kvrpcpb::RawScanRequest) -> kvrpcpb::RawScanResponse;
    raw_delete_range(kvrpcpb::RawDeleteRangeRequest) -> kvrpcpb::RawDeleteRangeResponse;
    raw_batch_scan(kvrpcpb::RawBatchScanRequest) -> kvrpcpb::RawBatchScanResponse;
    raw_get_key_ttl(kvrpcpb::RawGetKeyTtlRequest) -> kvrpcpb::RawGetKeyTtlResponse;
    raw_compare_and_swap(kvrpcpb::RawCasRequest) -> kvrpcpb::RawCasResponse;
    raw_checksum(kvrpcpb::RawChecksumRequest) -> kvrpcpb::RawChecksumResponse;
}

const T: Duration = Duration::from_secs(5);

#[tokio::test]
async fn mutual_tls_round_trip() {
    let pki = make_pki();
    let addr = start_server(&pki).await;
    let dir = tempfile::tempdir().unwrap();
    let config = SecurityConfig {
        ca_path: Some(write(&dir, "ca.pem", &pki.ca_pem)),
        cert_path: Some(write(&dir, "client.pem", &pki.client.0)),
        key_path: Some(write(&dir, "client.key", &pki.client.1)),
    };
    let manager = SecurityManager::from_config(&config).unwrap();
    assert!(manager.is_tls());
    let channel = manager.connect_channel(&addr, T, T).await.unwrap();
    // The handshake succeeded both ways; the RPC reaches the (empty) server.
    let status = TikvClient::new(channel)
        .raw_get(kvrpcpb::RawGetRequest::default())
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unimplemented, "{status:?}");
}

/// client-rust's form: `SecurityManager::load(ca, cert, key)` and
/// `connect(addr, factory)` hand back the stub the factory builds.
#[tokio::test]
async fn client_rust_load_and_connect_round_trip() {
    let pki = make_pki();
    let addr = start_server(&pki).await;
    let dir = tempfile::tempdir().unwrap();
    let manager = SecurityManager::load(
        write(&dir, "ca.pem", &pki.ca_pem),
        write(&dir, "client.pem", &pki.client.0),
        write(&dir, "client.key", &pki.client.1),
    )
    .unwrap();
    assert!(manager.is_tls());
    let mut client = manager.connect(&addr, TikvClient::new).await.unwrap();
    let status = client
        .raw_get(kvrpcpb::RawGetRequest::default())
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unimplemented, "{status:?}");
    // A missing key file is refused before any connection, naming the file.
    let err = SecurityManager::load(
        write(&dir, "ca2.pem", &pki.ca_pem),
        write(&dir, "client2.pem", &pki.client.0),
        dir.path().join("absent.key"),
    )
    .unwrap_err();
    assert!(
        matches!(err.failure(), Some(Failure::Security { .. })),
        "{err:?}"
    );
    assert!(err.to_string().contains("absent.key"), "{err}");
}

#[tokio::test]
async fn server_signed_by_another_ca_is_rejected() {
    let pki = make_pki();
    let other = make_pki();
    let addr = start_server(&pki).await;
    let dir = tempfile::tempdir().unwrap();
    let config = SecurityConfig {
        ca_path: Some(write(&dir, "ca.pem", &other.ca_pem)),
        cert_path: Some(write(&dir, "client.pem", &other.client.0)),
        key_path: Some(write(&dir, "client.key", &other.client.1)),
    };
    let manager = SecurityManager::from_config(&config).unwrap();
    let err = manager.connect_channel(&addr, T, T).await.unwrap_err();
    assert!(
        matches!(err.failure(), Some(Failure::Connect { .. })),
        "{err:?}"
    );
    assert!(err.to_string().contains(&addr), "{err}");
}

#[tokio::test]
async fn plaintext_client_cannot_talk_to_a_tls_server() {
    let pki = make_pki();
    let addr = start_server(&pki).await;
    let result = SecurityManager::plaintext()
        .connect_channel(&addr, T, T)
        .await;
    match result {
        Err(e) => assert!(
            matches!(
                e.failure(),
                Some(Failure::Connect { .. } | Failure::ConnectTimeout { .. })
            ),
            "{e:?}"
        ),
        Ok(channel) => {
            let status = TikvClient::new(channel)
                .raw_get(kvrpcpb::RawGetRequest::default())
                .await
                .unwrap_err();
            assert_ne!(status.code(), tonic::Code::Unimplemented, "{status:?}");
        }
    }
}

#[tokio::test]
async fn server_requiring_client_certificate_rejects_a_client_without_one() {
    let pki = make_pki();
    let addr = start_server(&pki).await;
    let dir = tempfile::tempdir().unwrap();
    let config = SecurityConfig {
        ca_path: Some(write(&dir, "ca.pem", &pki.ca_pem)),
        ..Default::default()
    };
    let manager = SecurityManager::from_config(&config).unwrap();
    // With TLS 1.3 the server may reject the missing certificate only after
    // the client considers the handshake done, so the failure shows either
    // at connect or at the first RPC; it must never reach the service.
    match manager.connect_channel(&addr, T, T).await {
        Err(e) => assert!(
            matches!(e.failure(), Some(Failure::Connect { .. })),
            "{e:?}"
        ),
        Ok(channel) => {
            let status = TikvClient::new(channel)
                .raw_get(kvrpcpb::RawGetRequest::default())
                .await
                .unwrap_err();
            assert_ne!(status.code(), tonic::Code::Unimplemented, "{status:?}");
        }
    }
}
