//! `LockService`'s `Service` contract, driven by a `tower-test` mock as the inner service: the
//! inner service's readiness is passed through, a request the layer rejects never reaches it,
//! and a request whose lock is busy stays pending (and does not reach it) until the lock is
//! free. One `redis-server` holds the locks; the HTTP side is all mock.

use crate::common;

use std::time::Duration;

use http::{Request, Response, StatusCode};
use lock_tests::RedisServer;
use lock_tower::name::Headers;
use lock_tower::{HeldLock, LockLayer};
use tokio_test::{assert_pending, assert_ready_ok};
use tower_test::mock;

const LIMIT: Duration = Duration::from_secs(20);

fn request(id: Option<&str>) -> Request<()> {
    let mut builder = Request::builder().uri("/stock");
    if let Some(id) = id {
        builder = builder.header("x-product-id", id);
    }
    builder.body(()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_is_the_inner_services_and_the_polled_instance_is_called() {
    let redis = RedisServer::start();
    let locks = lock_tests::client(&redis).await;
    let layer = LockLayer::new(locks, Headers::new("stock:<x-product-id>"));
    let (mut service, mut handle) = mock::spawn_layer::<Request<()>, Response<()>, _>(layer);

    handle.allow(0);
    assert_pending!(service.poll_ready());
    handle.allow(1);
    assert_ready_ok!(service.poll_ready());

    // Driven by its own task: the lock is taken while the future is polled.
    let response = tokio::spawn(service.call(request(Some("1"))));
    let (seen, reply) = common::bounded(LIMIT, handle.next_request())
        .await
        .expect("the request reaches the inner service");
    assert_eq!(seen.headers()["x-product-id"], "1");
    assert!(
        seen.extensions().get::<HeldLock>().is_some(),
        "the inner service runs holding the lock"
    );
    reply.send_response(Response::new(()));
    let response = common::bounded(LIMIT, response).await.unwrap().unwrap();
    assert_eq!(response.status(), StatusCode::OK);

    // One permit was used: the next call needs readiness again.
    assert_pending!(service.poll_ready());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_request_never_reaches_the_inner_service() {
    let redis = RedisServer::start();
    let locks = lock_tests::client(&redis).await;
    let layer = LockLayer::new(locks, Headers::new("stock:<x-product-id>")).require_name();
    let (mut service, mut handle) = mock::spawn_layer::<Request<()>, Response<()>, _>(layer);
    handle.allow(1);
    assert_ready_ok!(service.poll_ready());
    let response = common::bounded(LIMIT, service.call(request(None)))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    assert_pending!(handle.poll_request());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_lock_keeps_the_response_pending_until_it_is_released() {
    let redis = RedisServer::start();
    let locks = lock_tests::client(&redis).await;
    let holder = locks.lock("stock:7").acquire().await.unwrap();
    let layer = LockLayer::new(locks.clone(), Headers::new("stock:<x-product-id>"));
    let (mut service, mut handle) = mock::spawn_layer::<Request<()>, Response<()>, _>(layer);
    handle.allow(1);
    assert_ready_ok!(service.poll_ready());
    let mut response = tokio_test::task::spawn(service.call(request(Some("7"))));

    for _ in 0..5 {
        assert_pending!(response.poll());
        assert_pending!(
            handle.poll_request(),
            "the inner service must wait for the lock"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    holder.release().await.unwrap();
    // The response future is polled by hand: keep polling it until the request comes through.
    let reply = common::bounded(LIMIT, async {
        loop {
            assert_pending!(response.poll());
            if let std::task::Poll::Ready(Some((_, reply))) = handle.poll_request() {
                return reply;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    reply.send_response(Response::new(()));
    let response = common::bounded(LIMIT, async {
        loop {
            if let std::task::Poll::Ready(r) = response.poll() {
                return r;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
}

/// Regression: a gRPC response whose lock was lost while it streamed was reset (the body's
/// next frame was an error, which a gRPC client sees as a broken stream). It now ends
/// properly: after the data sent before the loss, trailers with `grpc-status: 10` (ABORTED).
/// The inner body is still open when this happens: the loss ended the stream, not the body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_stream_whose_lock_is_lost_ends_with_aborted_trailers_not_a_reset() {
    use bytes::Bytes;
    use http_body_util::BodyExt;
    use tower::ServiceExt;

    common::bounded(LIMIT, async {
        let redis = RedisServer::start();
        let locks = lock_tests::client(&redis).await;
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let body = std::sync::Arc::new(std::sync::Mutex::new(Some(common::ChannelBody(rx))));
        let inner = tower::service_fn(move |_: Request<()>| {
            let body = body.lock().unwrap().take().expect("one call");
            async move { Ok::<_, std::convert::Infallible>(Response::new(body)) }
        });
        let layer = LockLayer::new(locks.clone(), Headers::new("stock:<x-product-id>"))
            .lease(Duration::from_millis(300))
            .hold_until_body_end();
        let service = tower::Layer::layer(&layer, inner);
        let call = Request::builder()
            .uri("/shop.Inventory/Watch")
            .header("content-type", "application/grpc")
            .header("x-product-id", "1")
            .body(())
            .unwrap();
        let mut body = service.oneshot(call).await.unwrap().into_body();

        tx.send(Bytes::from_static(b"part 1")).await.unwrap();
        let first = body.frame().await.expect("a frame").expect("data");
        assert_eq!(&first.into_data().unwrap()[..], b"part 1");

        // Nothing more is sent: the lease runs out while the stream is open.
        let last = body
            .frame()
            .await
            .expect("a final frame")
            .expect("trailers, not an error that resets the stream");
        let trailers = last.into_trailers().expect("trailers");
        assert_eq!(trailers["grpc-status"], "10", "{trailers:?}");
        assert!(trailers.contains_key("grpc-message"), "{trailers:?}");
        assert!(body.frame().await.is_none(), "the stream has ended");
        drop(tx);
    })
    .await;
}
