//! The endpoint picker's ext_proc transport: Envoy's `ExternalProcessor.Process` streams served
//! by tonic on one tokio thread, each message handed to Python as its serialized bytes.
//!
//! The Python picker (`prefixroute.epp.exchange`) stays the one reading and answering
//! messages; what moves here is what grpc.aio spent most of a request's CPU on: HTTP/2,
//! gRPC framing and a Python coroutine step per message (about 220 us a message, measured by
//! `router-bench --grpc-floor`). A message becomes a job in a queue; the first job into an
//! empty queue writes one byte to a socket pair whose other end the picker's event loop
//! watches, so a busy picker takes many jobs per wake-up. Python answers each job with its
//! replies' bytes (`answer`), which releases the stream's task. A stream's messages go to
//! Python one at a time, each after the previous one's answer, as grpc.aio delivered them.
//!
//! The port also answers `grpc.health.v1.Health/Check` from a status table the picker sets
//! (`set_health`); the picker's separate health port keeps the full health service.

use std::collections::HashMap;
use std::convert::Infallible;
use std::io::{ErrorKind, Read, Write};
use std::net::TcpListener;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll};
use std::thread::JoinHandle;
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes};
use pyo3::exceptions::{PyOSError, PyRuntimeError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use tokio::sync::{mpsc, oneshot, watch};
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tokio_stream::StreamExt;
use tonic::body::BoxBody;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::codegen::{http, Body, BoxFuture, Service, StdError};
use tonic::server::{Grpc, NamedService, StreamingService, UnaryService};
use tonic::{Status, Streaming};

const PROCESS: &str = "/envoy.service.ext_proc.v3.ExternalProcessor/Process";
const HEALTH_CHECK: &str = "/grpc.health.v1.Health/Check";

/// What a job tells the picker.
const MESSAGE: u8 = 0; // a message of the stream (its bytes)
const ENDED: u8 = 1; // the gateway closed the stream: the request is over
const CANCELLED: u8 = 2; // the stream was reset, or its answer can no longer be sent

/// Messages pass through as they are: Python parses and builds them.
#[derive(Clone, Copy, Default)]
struct Raw;

impl Codec for Raw {
    type Encode = Bytes;
    type Decode = Bytes;
    type Encoder = Raw;
    type Decoder = Raw;

    fn encoder(&mut self) -> Raw {
        Raw
    }

    fn decoder(&mut self) -> Raw {
        Raw
    }
}

impl Encoder for Raw {
    type Item = Bytes;
    type Error = Status;

    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put(item);
        Ok(())
    }
}

impl Decoder for Raw {
    type Item = Bytes;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        let length = src.remaining();
        Ok(Some(src.copy_to_bytes(length)))
    }
}

struct Job {
    token: u64, // the answer's key (0: none is awaited)
    stream: u64,
    kind: u8,
    payload: Option<Bytes>,
    peer: Option<String>, // the gateway's address, on a stream's first message
}

type Answer = Option<Vec<Bytes>>; // None: the picker failed; the stream ends with an error

/// What the tokio thread and the picker's thread share.
struct Bridge {
    queue: Mutex<Vec<Job>>,
    waiting: Mutex<HashMap<u64, oneshot::Sender<Answer>>>,
    wake: UnixStream, // written when a job lands in an empty queue
    next: AtomicU64,
    health: Mutex<HashMap<String, i32>>,
    max_message: usize,
}

impl Bridge {
    fn push(&self, job: Job) {
        let was_empty = {
            let mut queue = self.queue.lock().unwrap();
            let empty = queue.is_empty();
            queue.push(job);
            empty
        };
        if was_empty {
            // A full socket buffer means a wake-up is pending already: nothing is lost.
            let _ = (&self.wake).write(&[1]);
        }
    }

    fn number(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Hand a message to the picker; its replies come on the receiver (the token is the answer's key).
    fn ask(&self, stream: u64, payload: Bytes, peer: Option<String>) -> (u64, oneshot::Receiver<Answer>) {
        let token = self.number();
        let (send, receive) = oneshot::channel();
        self.waiting.lock().unwrap().insert(token, send);
        self.push(Job { token, stream, kind: MESSAGE, payload: Some(payload), peer });
        (token, receive)
    }

    /// No answer is awaited for `token` any more (its stream is gone).
    fn forget(&self, token: u64) {
        self.waiting.lock().unwrap().remove(&token);
    }

    fn close(&self, stream: u64, kind: u8) {
        self.push(Job { token: 0, stream, kind, payload: None, peer: None });
    }
}

/// One stream: its messages to the picker in turn, each one's replies back to the gateway.
async fn process(bridge: Arc<Bridge>, mut inbound: Streaming<Bytes>, mut peer: Option<String>, out: mpsc::Sender<Result<Bytes, Status>>) {
    let stream = bridge.number();
    let mut seen = false; // the picker has heard of this stream
    let mut ending = CANCELLED;
    loop {
        let message = match inbound.message().await {
            Ok(Some(message)) => message,
            Ok(None) => {
                ending = ENDED;
                break;
            }
            Err(status) => {
                // Reset by the gateway (then nobody reads this), or a message over the size limit
                // or not a gRPC frame: the stream ends with that status, as grpc.aio ends it.
                let _ = out.send(Err(status)).await;
                break;
            }
        };
        seen = true;
        let (token, answer) = bridge.ask(stream, message, peer.take());
        let replies = tokio::select! {
            answer = answer => answer.ok().flatten(),
            _ = out.closed() => {
                bridge.forget(token); // the gateway left while the picker decided (the gate may wait)
                break;
            }
        };
        let Some(replies) = replies else {
            let _ = out.send(Err(Status::internal("the endpoint picker failed on this request"))).await;
            break;
        };
        for reply in replies {
            if out.send(Ok(reply)).await.is_err() {
                break;
            }
        }
        if out.is_closed() {
            break;
        }
    }
    if seen {
        bridge.close(stream, ending);
    }
}

struct ProcessCall(Arc<Bridge>);

impl StreamingService<Bytes> for ProcessCall {
    type Response = Bytes;
    type ResponseStream = ReceiverStream<Result<Bytes, Status>>;
    type Future = BoxFuture<tonic::Response<Self::ResponseStream>, Status>;

    fn call(&mut self, request: tonic::Request<Streaming<Bytes>>) -> Self::Future {
        let bridge = self.0.clone();
        // An IPv4 client of a dual-stack socket as IPv4 (as grpc names it), for --trusted-fronts.
        let peer = request.remote_addr().map(|address| address.ip().to_canonical().to_string());
        let (out, replies) = mpsc::channel(16);
        tokio::spawn(process(bridge, request.into_inner(), peer, out));
        Box::pin(async move { Ok(tonic::Response::new(ReceiverStream::new(replies))) })
    }
}

/// `grpc.health.v1.HealthCheckRequest` is one string field (1, the service); the answer one
/// enum field (1, the status): written out rather than a protobuf crate for two fields.
fn service_named(mut request: Bytes) -> Result<String, Status> {
    let mut service = String::new();
    while request.has_remaining() {
        let tag = request.get_u8();
        let length = varint(&mut request).ok_or_else(|| Status::invalid_argument("bad HealthCheckRequest"))? as usize;
        if tag != 0x0a || length > request.remaining() {
            return Err(Status::invalid_argument("bad HealthCheckRequest"));
        }
        let text = request.split_to(length);
        service = String::from_utf8(text.to_vec()).map_err(|_| Status::invalid_argument("bad HealthCheckRequest"))?;
    }
    Ok(service)
}

fn varint(data: &mut Bytes) -> Option<u64> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        if !data.has_remaining() {
            return None;
        }
        let byte = data.get_u8();
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

struct HealthCall(Arc<Bridge>);

impl UnaryService<Bytes> for HealthCall {
    type Response = Bytes;
    type Future = BoxFuture<tonic::Response<Bytes>, Status>;

    fn call(&mut self, request: tonic::Request<Bytes>) -> Self::Future {
        let bridge = self.0.clone();
        Box::pin(async move {
            let service = service_named(request.into_inner())?;
            let status = bridge.health.lock().unwrap().get(&service).copied();
            match status {
                Some(status) => Ok(tonic::Response::new(Bytes::from(vec![0x08, status as u8]))),
                None => Err(Status::not_found(format!("unknown service {service:?}"))),
            }
        })
    }
}

fn unimplemented() -> http::Response<BoxBody> {
    let mut response = http::Response::new(tonic::body::empty_body());
    let headers = response.headers_mut();
    headers.insert("grpc-status", http::HeaderValue::from_static("12"));
    headers.insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/grpc"));
    response
}

/// A gRPC service answering one method path (anything else: UNIMPLEMENTED) with `$serve`,
/// an async block that has the bridge and the HTTP request in scope. The two services of the
/// port (ext_proc and Health/Check) differ only in their name, path and call.
macro_rules! one_method_service {
    ($service:ident, $name:literal, $path:expr, |$bridge:ident, $request:ident| $serve:expr) => {
        #[derive(Clone)]
        struct $service(Arc<Bridge>);

        impl NamedService for $service {
            const NAME: &'static str = $name;
        }

        impl<B> Service<http::Request<B>> for $service
        where
            B: Body + Send + 'static,
            B::Error: Into<StdError> + Send + 'static,
        {
            type Response = http::Response<BoxBody>;
            type Error = Infallible;
            type Future = BoxFuture<Self::Response, Self::Error>;

            fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
                Poll::Ready(Ok(()))
            }

            fn call(&mut self, $request: http::Request<B>) -> Self::Future {
                if $request.uri().path() != $path {
                    return Box::pin(async { Ok(unimplemented()) });
                }
                let $bridge = self.0.clone();
                Box::pin(async move { Ok($serve) })
            }
        }
    };
}

one_method_service!(Picker, "envoy.service.ext_proc.v3.ExternalProcessor", PROCESS, |bridge, request| {
    let limit = bridge.max_message;
    let mut grpc = Grpc::new(Raw).apply_max_message_size_config(Some(limit), Some(limit));
    grpc.streaming(ProcessCall(bridge), request).await
});

// Health/Check only; Watch is served by the health port's grpc.aio server.
one_method_service!(Health, "grpc.health.v1.Health", HEALTH_CHECK, |bridge, request| {
    Grpc::new(Raw).unary(HealthCall(bridge), request).await
});

/// The ext_proc server: bound when made, serving once `start` is called, on its own thread.
#[pyclass(module = "prefixroute_native")]
pub struct ExtProcServer {
    bridge: Arc<Bridge>,
    woken: UnixStream, // the end the picker's event loop watches
    listener: Mutex<Option<TcpListener>>,
    port: u16,
    shutdown: Mutex<Option<(watch::Sender<bool>, oneshot::Sender<()>)>>,
    thread: Mutex<Option<JoinHandle<()>>>,
    running: Arc<AtomicBool>,
    finished: Arc<(Mutex<bool>, Condvar)>, // set when the serving thread is done
    failure: Arc<Mutex<Option<String>>>,   // why serving stopped, when it was not asked to
}

#[pymethods]
impl ExtProcServer {
    #[new]
    #[pyo3(signature = (host, port, max_message = 64 * 1024 * 1024))]
    fn new(host: &str, port: u16, max_message: usize) -> PyResult<Self> {
        let listener = TcpListener::bind((host, port)).map_err(|e| PyOSError::new_err(format!("cannot listen on {host}:{port}: {e}")))?;
        listener.set_nonblocking(true)?;
        let port = listener.local_addr()?.port();
        let (wake, woken) = UnixStream::pair()?;
        wake.set_nonblocking(true)?;
        woken.set_nonblocking(true)?;
        let bridge = Bridge {
            queue: Mutex::new(Vec::new()),
            waiting: Mutex::new(HashMap::new()),
            wake,
            next: AtomicU64::new(0),
            health: Mutex::new(HashMap::new()),
            max_message,
        };
        Ok(Self {
            bridge: Arc::new(bridge),
            woken,
            listener: Mutex::new(Some(listener)),
            port,
            shutdown: Mutex::new(None),
            thread: Mutex::new(None),
            running: Arc::new(AtomicBool::new(false)),
            finished: Arc::new((Mutex::new(false), Condvar::new())),
            failure: Arc::new(Mutex::new(None)),
        })
    }

    /// The bound port (the one asked for, or the free one the system gave for 0).
    #[getter]
    fn port(&self) -> u16 {
        self.port
    }

    /// The descriptor that becomes readable when jobs wait (for the event loop's add_reader).
    fn fileno(&self) -> i32 {
        self.woken.as_raw_fd()
    }

    /// Serve, on a thread of its own.
    fn start(&self) -> PyResult<()> {
        let listener = self.listener.lock().unwrap().take().ok_or_else(|| PyRuntimeError::new_err("already started"))?;
        let (stop, stopped) = watch::channel(false);
        let (abort, aborted) = oneshot::channel::<()>();
        let bridge = self.bridge.clone();
        let running = self.running.clone();
        let finished = self.finished.clone();
        let failure = self.failure.clone();
        let leftover = self.bridge.clone();
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let thread = std::thread::Builder::new().name("ext-proc".into()).spawn(move || {
            runtime.block_on(async move {
                let serve = async move {
                    let listener = match tokio::net::TcpListener::from_std(listener) {
                        Ok(listener) => listener,
                        Err(e) => return Err(e.to_string()),
                    };
                    // Each answer is one small write the gateway waits for: no Nagle delay.
                    let incoming = TcpListenerStream::new(listener).map(|accepted| {
                        accepted.inspect(|socket| {
                            let _ = socket.set_nodelay(true);
                        })
                    });
                    let mut stopped = stopped;
                    let signal = async move {
                        while !*stopped.borrow() {
                            if stopped.changed().await.is_err() {
                                break;
                            }
                        }
                    };
                    tonic::transport::Server::builder()
                        .add_service(Picker(bridge.clone()))
                        .add_service(Health(bridge))
                        .serve_with_incoming_shutdown(incoming, signal)
                        .await
                        .map_err(|e| e.to_string())
                };
                tokio::select! {
                    served = serve => if let Err(e) = served { *failure.lock().unwrap() = Some(e) },
                    _ = aborted => {},
                }
            });
            drop(runtime); // its tasks (open streams) are gone before anyone is told it is done
            leftover.waiting.lock().unwrap().clear(); // answers nobody awaits now
            running.store(false, Ordering::SeqCst);
            let (done, changed) = &*finished;
            *done.lock().unwrap() = true;
            changed.notify_all();
        })?;
        self.running.store(true, Ordering::SeqCst);
        *self.shutdown.lock().unwrap() = Some((stop, abort));
        *self.thread.lock().unwrap() = Some(thread);
        Ok(())
    }

    /// Stop taking streams and let those open finish (`running` turns false when they have).
    fn stop(&self) {
        if let Some((stop, _)) = self.shutdown.lock().unwrap().as_ref() {
            let _ = stop.send(true);
        }
    }

    /// Drop every open stream now.
    fn abort(&self) {
        if let Some((_, abort)) = self.shutdown.lock().unwrap().take() {
            let _ = abort.send(());
        }
    }

    /// Wait (without the GIL) until the serving thread is done, at most `timeout` seconds
    /// (None: for as long as it serves); whether it is done.
    #[pyo3(signature = (timeout = None))]
    fn join(&self, py: Python<'_>, timeout: Option<f64>) -> bool {
        let finished = self.finished.clone();
        py.allow_threads(move || {
            let (done, changed) = &*finished;
            let guard = done.lock().unwrap();
            match timeout {
                None => *changed.wait_while(guard, |done| !*done).unwrap(),
                Some(seconds) => {
                    let limit = Duration::from_secs_f64(seconds.max(0.0));
                    *changed.wait_timeout_while(guard, limit, |done| !*done).unwrap().0
                }
            }
        })
    }

    /// Why serving ended when nobody asked it to (None: it serves, or it was stopped).
    #[getter]
    fn failure(&self) -> Option<String> {
        self.failure.lock().unwrap().clone()
    }

    /// Messages handed to the picker and not answered yet.
    fn pending(&self) -> usize {
        self.bridge.waiting.lock().unwrap().len()
    }

    #[getter]
    fn running(&self) -> bool {
        self.running.load(Ordering::SeqCst)
    }

    /// The jobs waiting, oldest first: (token, stream, kind, payload, peer). Drains the wake-up
    /// socket first, so a job pushed after this call wakes the loop again.
    fn take<'py>(&self, py: Python<'py>) -> Vec<(u64, u64, u8, Option<Bound<'py, PyBytes>>, Option<String>)> {
        let mut sink = [0u8; 256];
        loop {
            match (&self.woken).read(&mut sink) {
                Ok(0) => break,
                Ok(_) => continue,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(_) => break, // WouldBlock: drained
            }
        }
        let jobs = std::mem::take(&mut *self.bridge.queue.lock().unwrap());
        jobs.into_iter()
            .map(|job| (job.token, job.stream, job.kind, job.payload.map(|p| PyBytes::new(py, &p)), job.peer))
            .collect()
    }

    /// The replies to a job's message (None: the picker failed on it; the stream ends with an
    /// error). An answer whose stream is gone is dropped.
    #[pyo3(signature = (token, replies))]
    fn answer(&self, token: u64, replies: Option<Vec<Vec<u8>>>) {
        let waiting = self.bridge.waiting.lock().unwrap().remove(&token);
        if let Some(send) = waiting {
            let _ = send.send(replies.map(|r| r.into_iter().map(Bytes::from).collect()));
        }
    }

    /// A service's status as `Health/Check` answers it on this port (1 SERVING, 2 NOT_SERVING).
    fn set_health(&self, service: String, status: i32) {
        self.bridge.health.lock().unwrap().insert(service, status);
    }
}

impl Drop for ExtProcServer {
    fn drop(&mut self) {
        self.abort(); // a server dropped while serving takes its thread down with it
    }
}

#[pyfunction]
pub fn job_kinds() -> (u8, u8, u8) {
    (MESSAGE, ENDED, CANCELLED)
}
