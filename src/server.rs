//! Start-up: connect, build the lock, bind, serve until Ctrl-C or SIGTERM, give the locks back.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context;
use tokio::net::TcpListener;

use crate::config::Config;
use crate::http::admin::ResetAccess;
use crate::http::dashboard::EventStreams;
use crate::http::{app, AppState, Limits};
use crate::metrics::Metrics;
use crate::orders::RunningWriter;
use crate::sale::local_queue::LocalQueue;
use crate::sale::segments::Segments;
use crate::sale::stock::{Seller, StockStore};
use crate::sale::{Sale, SaleSetup, STEPS_AFTER_ACQUIRE_BUDGET};
use crate::store;
use crate::store::redis_master::{MasterAddress, MasterConnection};
use crate::wiring;

/// Connects to every backend `config` needs and builds the app state.
/// Fails with a message that names the unreachable server and how to start it.
pub async fn build_state(config: &Config) -> anyhow::Result<AppState> {
    let reset_access = ResetAccess::new(config.bind, config.admin_token.clone(), config.allowed_hosts.clone())?;
    let (stock_redis, connection) =
        store::redis_master::connect_checked(&config.redis_url, "stock Redis", "--redis-url / SECKILL_REDIS_URL")
            .await?;
    let segments = wiring::segments(config)?;
    let sold_out = wiring::sold_out_memory(config, segments)?;
    let group_max = wiring::group_max(config)?;
    let store = stock_store(config, &stock_redis, connection, segments).await?;
    let keys = store.keys().clone();
    let event_streams = event_streams(config, &stock_redis, &store).await?;
    let guarding = wiring::build(config, &stock_redis)
        .await
        .with_context(|| format!("starting the `{}` lock", config.lock))?;
    let fencing = config.lock.fencing(config.fencing);
    // Some locks cannot hand over: ZooKeeper's next grant is another instance's node.
    let hand_over = config.hand_over && guarding.hands_over();
    let metrics = Metrics::new(config.lock.name(), fencing.name(), &config.instance_name());
    let sale = Sale::new(SaleSetup {
        store,
        guarding,
        seller: Seller {
            instance: config.instance_name(),
            port: config.port,
            strategy: config.lock.name(),
        },
        acquire_timeout: config.acquire_timeout(),
        fencing,
        widen_race: config.lock.expected_to_oversell(),
        chaos_pause_before_write: config.chaos_pause_before_write_ms.map(std::time::Duration::from_millis),
        metrics: std::sync::Arc::new(metrics),
        sold_out,
        local_queue: (config.local_queue && config.lock.takes_a_local_queue())
            .then(|| segments.all().map(|_| LocalQueue::new(hand_over)).collect()),
        group_max,
    });
    let order_writer = wiring::order_writers(config, &stock_redis, &keys, segments, sale.metrics().clone())
        .await?
        .map(RunningWriter::start);
    let limits = Limits {
        max_in_flight: config.max_in_flight as usize,
        request_timeout: request_timeout(config),
    };
    if let ResetAccess::Refused = reset_access {
        tracing::warn!(bind = %config.bind, "no --admin-token: POST /stock/reset is refused on this address");
    }
    Ok(AppState::new(
        sale,
        config.initial_stock,
        limits,
        reset_access,
        event_streams,
        order_writer,
    ))
}

/// The stock, as `config` splits and sells it, seeded if the Redis has no sale yet.
async fn stock_store(
    config: &Config,
    stock_redis: &MasterAddress,
    connection: MasterConnection,
    segments: Segments,
) -> anyhow::Result<StockStore> {
    let store = StockStore::new(connection)
        .with_segments(segments)
        .with_one_per_buyer(config.one_per_buyer)
        .with_orders(config.orders)
        .with_keys(wiring::stock_keys(config, stock_redis)?);
    let store = match wiring::stock_replica_wait(config) {
        None => store,
        Some(wait) => {
            let writes = MasterConnection::connect(stock_redis)
                .await
                .context("connecting the stock's writes, which wait for replicas (--stock-wait-replicas)")?;
            store.with_replica_wait(writes, wait)
        }
    };
    store
        .seed_if_missing(config.initial_stock)
        .await
        .context("seeding the stock in Redis")?;
    Ok(store)
}

/// The dashboard's event streams, bounded by `--max-event-streams`, reading the sale on
/// a connection of their own so that their long replies never hold up a sale.
async fn event_streams(
    config: &Config,
    stock_redis: &MasterAddress,
    store: &StockStore,
) -> anyhow::Result<EventStreams> {
    let connection = MasterConnection::connect(stock_redis)
        .await
        .context("connecting the dashboard's event streams to the stock Redis")?;
    Ok(EventStreams::new(
        store.reading_on(connection),
        config.max_event_streams,
    ))
}

/// How long one request may take before the service answers 504 itself: the
/// lock wait, plus the sale's own bounded steps (see [`crate::sale`]) in every segment a
/// buyer may walk through, plus slack.
fn request_timeout(config: &Config) -> Duration {
    config.acquire_timeout() + STEPS_AFTER_ACQUIRE_BUDGET * config.stock_segments.max(1)
}

/// Serves until the process is asked to stop, then finishes the requests in flight.
pub async fn serve(config: Config) -> anyhow::Result<()> {
    let state = build_state(&config).await?;
    let address = SocketAddr::new(config.bind, config.port);
    let listener = TcpListener::bind(address).await.map_err(|error| {
        anyhow::anyhow!(
            "cannot listen on {address}: {error}.\n  Stop whatever uses port {port} (`ss -ltnp 'sport = :{port}'` shows it) \
             or pick another with --port / SECKILL_PORT.",
            port = config.port
        )
    })?;
    tracing::info!(%address, strategy = %config.lock, instance = %config.instance_name(), "seckill is serving");
    serve_with(listener, state, shutdown_signal(), config.shutdown_grace()).await?;
    tracing::info!("stopped");
    Ok(())
}

/// Serves `state` on an already bound listener until `shutdown` completes; then lets
/// the requests in flight finish for at most `grace`, and gives every lock back.
/// (Tests use it to run two instances in one process.)
pub async fn serve_with(
    listener: TcpListener,
    state: AppState,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    grace: Duration,
) -> std::io::Result<()> {
    let (asked_to_stop, stop_asked) = tokio::sync::oneshot::channel::<()>();
    let shutdown = async move {
        shutdown.await;
        let _ = asked_to_stop.send(());
    };
    let server = std::future::IntoFuture::into_future(
        axum::serve(listener, app(state.clone())).with_graceful_shutdown(shutdown),
    );
    let grace_over = async move {
        match stop_asked.await {
            Ok(()) => tokio::time::sleep(grace).await,
            Err(_) => std::future::pending().await, // the server ended by itself
        }
    };
    let result = tokio::select! {
        result = server => result,
        () = grace_over => {
            tracing::warn!(?grace, "requests still in flight after the grace period; stopping anyway");
            Ok(())
        }
    };
    state.shutdown().await;
    result
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = terminate => {},
    }
}

/// An instance serving on an ephemeral loopback port, for tests and embedding.
pub struct Instance {
    /// Base URL, like `http://127.0.0.1:41234`.
    pub url: String,
    pub port: u16,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Instance {
    /// Binds a free port on 127.0.0.1, connects as `config` says, and starts serving.
    /// `config.port` is replaced by the port actually bound.
    pub async fn start(mut config: Config) -> anyhow::Result<Instance> {
        let listener = TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0)).await?;
        let port = listener.local_addr()?.port();
        config.port = port;
        let state = build_state(&config).await?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(serve_with(
            listener,
            state,
            async {
                let _ = stopped.await;
            },
            config.shutdown_grace(),
        ));
        Ok(Instance {
            url: format!("http://127.0.0.1:{port}"),
            port,
            stop: Some(stop),
            task,
        })
    }

    /// Stops accepting, finishes requests in flight (within the grace period), gives
    /// the locks back, and waits for the server to end.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        (&mut self.task).await??;
        Ok(())
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}
