package org.mjfl.app;

import android.app.Notification;
import android.app.NotificationChannel;
import android.app.NotificationManager;
import android.app.PendingIntent;
import android.app.Service;
import android.content.Intent;
import android.content.pm.ServiceInfo;
import android.os.Build;
import android.os.IBinder;
import android.os.PowerManager;
import android.util.Log;
import java.io.File;
import java.io.IOException;
import java.time.Duration;
import java.util.Objects;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.function.Consumer;
import java.util.logging.Level;
import java.util.logging.Logger;
import okhttp3.OkHttpClient;
import org.mjfl.client.Device;
import org.mjfl.client.DeviceConfig;
import org.mjfl.client.DeviceListener;
import org.mjfl.client.cache.ArtifactCache;
import org.mjfl.client.net.Tls;

/**
 * The foreground service that is the device: it holds one client-core {@link Device} (which
 * connects, trains and reconnects on its own) for as long as the app runs, a partial wake lock
 * so that training goes on with the screen off, and the notification Android requires.
 *
 * <p>Started by {@link MainActivity} with the extras {@code url}, {@code device_id} and
 * {@code token}; a start with other extras replaces the device, the same ones are ignored.
 */
public final class DeviceService extends Service {
    static final String EXTRA_URL = "url";
    static final String EXTRA_DEVICE_ID = "device_id";
    static final String EXTRA_TOKEN = "token";
    static final String EXTRA_SECRET = "secret"; // the enrolled secret (protocol.md 5.1.1); may be absent
    static final String EXTRA_PIN = "pin"; // sha256 of the coordinator's certificate, for wss://
    private static final String CHANNEL = "mjfl-device";
    private static final int NOTIFICATION = 1;

    private final StatusBoard board = StatusBoard.shared();
    private final Consumer<StatusBoard.Status> notifier = this::updateNotification;
    private ScheduledExecutorService timers;
    private OkHttpClient http;
    private Logger mjflLogger;
    private LogcatHandler logcat;
    private PowerManager.WakeLock wakeLock;
    private ExecuTorchTrainer trainer;
    private Device device; // touched on the main thread only
    private Thread runner;
    private String running; // url, id and token of the device that runs

    @Override
    public void onCreate() {
        super.onCreate();
        NotificationManager nm = getSystemService(NotificationManager.class);
        nm.createNotificationChannel(new NotificationChannel(CHANNEL, "mjfl device", NotificationManager.IMPORTANCE_LOW));
        Notification n = notification("starting");
        if (Build.VERSION.SDK_INT >= Build.VERSION_CODES.Q) {
            startForeground(NOTIFICATION, n, ServiceInfo.FOREGROUND_SERVICE_TYPE_DATA_SYNC);
        } else {
            startForeground(NOTIFICATION, n);
        }
        logcat = new LogcatHandler();
        // Held in a field: java.util.logging keeps loggers weakly, and this one's set-up must last.
        mjflLogger = Logger.getLogger("org.mjfl");
        mjflLogger.setUseParentHandlers(false); // logcat once, under MJFL, not also under the logger's name
        mjflLogger.addHandler(logcat);
        mjflLogger.setLevel(Level.INFO);
        timers = Executors.newScheduledThreadPool(2, r -> {
            Thread t = new Thread(r, "mjfl-timers");
            t.setDaemon(true);
            return t;
        });
        http = new OkHttpClient.Builder()
                .connectTimeout(Duration.ofSeconds(10))
                .readTimeout(Duration.ZERO) // liveness is the protocol's heartbeats (protocol.md 10)
                .writeTimeout(Duration.ZERO)
                .build();
        PowerManager pm = getSystemService(PowerManager.class);
        // Held while the service lives: a phone of the testbed trains with its screen off.
        wakeLock = pm.newWakeLock(PowerManager.PARTIAL_WAKE_LOCK, "mjfl:device");
        wakeLock.setReferenceCounted(false);
        wakeLock.acquire();
        trainer = new ExecuTorchTrainer(new AndroidMemory(this), org.mjfl.client.net.Clock.SYSTEM);
        board.listen(notifier);
    }

    @Override
    public int onStartCommand(Intent intent, int flags, int startId) {
        String url = intent == null ? null : intent.getStringExtra(EXTRA_URL);
        String id = intent == null ? null : intent.getStringExtra(EXTRA_DEVICE_ID);
        String token = intent == null ? null : intent.getStringExtra(EXTRA_TOKEN);
        if (url == null || id == null) {
            Log.w(MainActivity.TAG, "service started without url and device_id; nothing to do");
            return START_NOT_STICKY;
        }
        String secret = intent.getStringExtra(EXTRA_SECRET);
        String pin = intent.getStringExtra(EXTRA_PIN);
        String config = url + "\n" + id + "\n" + Objects.toString(token, "") + "\n" + secret + "\n" + pin;
        if (config.equals(running) && runner != null && runner.isAlive()) {
            return START_REDELIVER_INTENT;
        }
        stopDevice();
        startDevice(url, id, token == null ? "" : token, secret, pin);
        running = config;
        // Killed for memory, Android restarts the service with this intent: the device comes back.
        return START_REDELIVER_INTENT;
    }

    private void startDevice(String url, String id, String token, String secret, String pin) {
        board.started(id, url);
        OkHttpClient client = http;
        if (pin != null && !pin.isEmpty()) {
            try {
                client = Tls.pinSha256(http.newBuilder(), pin).build();
            } catch (java.security.GeneralSecurityException | IllegalArgumentException e) {
                board.connection("bad certificate pin: " + e.getMessage());
                Log.e(MainActivity.TAG, "bad certificate pin", e);
                return;
            }
        }
        ArtifactCache cache;
        try {
            cache = new ArtifactCache(new File(getFilesDir(), "artifacts").toPath());
        } catch (IOException e) {
            board.connection("cannot open the artifact cache: " + e);
            Log.e(MainActivity.TAG, "cannot open the artifact cache", e);
            return;
        }
        DeviceConfig cfg = DeviceConfig.builder(url, id, new ReportingTrainer(trainer, board), cache)
                .token(token)
                .secret(secret == null || secret.isEmpty() ? null : secret)
                .facts(new AndroidFacts(this, board))
                .build();
        Device d = new Device(cfg, client, timers);
        d.listen(new DeviceListener() {
            @Override
            public void welcomed(String coordinatorId) {
                board.connection("connected to " + coordinatorId);
            }

            @Override
            public void sessionEnded(String why) {
                board.connection("disconnected: " + why);
            }

            @Override
            public void reconnecting(double delayS) {
                board.connection(String.format(java.util.Locale.ROOT, "reconnecting in %.2f s", delayS));
            }
        });
        device = d;
        runner = new Thread(() -> {
            Log.i(MainActivity.TAG, "device " + id + " -> " + url);
            try {
                Device.Stop stop = d.run();
                board.connection("stopped: " + describe(stop));
                Log.i(MainActivity.TAG, "device " + id + " stopped: " + stop + "; " + d.stats());
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            } catch (RuntimeException e) {
                board.connection("stopped by an error: " + e);
                Log.e(MainActivity.TAG, "device " + id + " stopped by an error", e);
            }
        }, "mjfl-device");
        runner.start();
    }

    private static String describe(Device.Stop stop) {
        switch (stop) {
            case COORDINATOR_BYE:
                return "the coordinator said bye (start the app again to reconnect)";
            case REFUSED:
                return "refused (unauthorized or no common protocol version)";
            default:
                return "stopped";
        }
    }

    /**
     * Says bye {@code going_away} and lets the old device's thread end by itself (never waits on
     * the main thread): a task in training stops at its next step.
     */
    private void stopDevice() {
        if (device != null) {
            device.stop();
            device = null;
        }
        runner = null;
        running = null;
    }

    @Override
    public void onDestroy() {
        board.unlisten(notifier);
        stopDevice();
        trainer.close();
        http.dispatcher().cancelAll();
        http.dispatcher().executorService().shutdown();
        http.connectionPool().evictAll();
        timers.shutdownNow();
        mjflLogger.removeHandler(logcat);
        wakeLock.release();
        board.connection("not running");
        super.onDestroy();
    }

    @Override
    public IBinder onBind(Intent intent) {
        return null;
    }

    private void updateNotification(StatusBoard.Status s) {
        String text = s.task() != null ? "training " + s.task() : s.connection();
        getSystemService(NotificationManager.class).notify(NOTIFICATION, notification(text));
    }

    private Notification notification(String text) {
        Intent open = new Intent(this, MainActivity.class);
        PendingIntent tap = PendingIntent.getActivity(this, 0, open, PendingIntent.FLAG_IMMUTABLE);
        return new Notification.Builder(this, CHANNEL)
                .setContentTitle("mjfl device")
                .setContentText(text)
                .setSmallIcon(android.R.drawable.stat_notify_sync)
                .setContentIntent(tap)
                .setOngoing(true)
                .setOnlyAlertOnce(true)
                .build();
    }
}
