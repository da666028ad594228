package org.mjfl.app;

import android.app.Notification;
import android.app.NotificationChannel;
import android.app.NotificationManager;
import android.app.PendingIntent;
import android.app.Service;
import android.content.BroadcastReceiver;
import android.content.Context;
import android.content.Intent;
import android.content.IntentFilter;
import android.content.pm.ServiceInfo;
import android.os.BatteryManager;
import android.os.Build;
import android.os.Handler;
import android.os.IBinder;
import android.os.Looper;
import android.os.PowerManager;
import android.util.Log;
import java.io.File;
import java.io.IOException;
import java.time.Duration;
import java.util.Arrays;
import java.util.Map;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.Consumer;
import java.util.logging.Level;
import java.util.logging.Logger;
import okhttp3.OkHttpClient;
import org.mjfl.client.Device;
import org.mjfl.client.DeviceConfig;
import org.mjfl.client.DeviceListener;
import org.mjfl.client.cache.ArtifactCache;
import org.mjfl.client.net.Clock;
import org.mjfl.client.net.Tls;

/**
 * The foreground service that is the device: it holds one client-core {@link Device} (which
 * connects, trains and reconnects on its own) and the notification Android requires. Partial
 * wake locks: while a task trains ({@link WakefulTrainer}), and while a device runs and the phone
 * is on power ({@link StayAwake}), so that an enrolled phone stays reachable between tasks.
 * Every clock it hands client-core is {@link AndroidClock#ELAPSED}, which counts suspend.
 *
 * <p>Started by {@link StartActivity} with a {@link DeviceRequest}'s extras; a start with another
 * request replaces the device, the same one is ignored ({@link DeviceRuns}). When the device
 * stops by itself (the coordinator's bye, a refusal, a phone that cannot train), the service
 * stops too: notification gone, nothing awake; `am start` starts it again.
 */
public final class DeviceService extends Service {
    private static final String CHANNEL = "mjfl-device";
    private static final int NOTIFICATION = 1;

    private final StatusBoard board = StatusBoard.shared();
    private final Consumer<StatusBoard.Status> notifier = this::updateNotification;
    private final Object notificationLock = new Object();
    private boolean destroyed; // guarded by notificationLock: no notification is posted after onDestroy
    private final DeviceRuns runs = new DeviceRuns(); // main thread only
    private Handler main;
    private ScheduledExecutorService timers;
    private OkHttpClient http;
    private Logger mjflLogger;
    private LogcatHandler logcat;
    private PowerManager.WakeLock wakeLock;
    private StayAwake stayAwake;
    private BroadcastReceiver power;
    private boolean foreground; // main thread only: false when Android refused startForeground
    private ExecuTorchTrainer trainer;
    private Device device; // main thread only
    private int lastStartId; // main thread only

    @Override
    public void onCreate() {
        super.onCreate();
        main = new Handler(Looper.getMainLooper());
        NotificationManager nm = getSystemService(NotificationManager.class);
        nm.createNotificationChannel(new NotificationChannel(CHANNEL, "mjfl device", NotificationManager.IMPORTANCE_LOW));
        foreground = goForeground(notification("starting"));
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
        // Held per task by WakefulTrainer, on battery as on power.
        wakeLock = getSystemService(PowerManager.class).newWakeLock(PowerManager.PARTIAL_WAKE_LOCK, "mjfl:training");
        wakeLock.setReferenceCounted(false); // acquire(timeout) then replaces the earlier timeout
        stayAwake = stayAwakeOnPower();
        trainer = new ExecuTorchTrainer(new AndroidMemory(this), AndroidClock.ELAPSED);
        board.listen(notifier);
    }

    /**
     * The lock held while a device runs and the phone is on power ({@link StayAwake} says why, and
     * its cost), fed by the battery broadcast ({@link #power}, unregistered in onDestroy).
     */
    private StayAwake stayAwakeOnPower() {
        PowerManager.WakeLock enrolled = getSystemService(PowerManager.class)
                .newWakeLock(PowerManager.PARTIAL_WAKE_LOCK, "mjfl:enrolled");
        enrolled.setReferenceCounted(false);
        StayAwake awake = new StayAwake(new StayAwake.Lock() {
            @Override
            public void acquire() {
                enrolled.acquire(); // no timeout: released on unplug, on the device's end and in onDestroy
            }

            @Override
            public void release() {
                if (enrolled.isHeld()) {
                    enrolled.release();
                }
            }
        }, line -> Log.i(MainActivity.TAG, line));
        power = new BroadcastReceiver() {
            @Override
            public void onReceive(Context context, Intent battery) {
                awake.onPower(DeviceState.onPower(battery.getIntExtra(BatteryManager.EXTRA_PLUGGED, -1),
                        battery.getIntExtra(BatteryManager.EXTRA_STATUS, -1)));
            }
        };
        // A system broadcast: no RECEIVER_EXPORTED flag needed; the sticky intent arrives at once.
        registerReceiver(power, new IntentFilter(Intent.ACTION_BATTERY_CHANGED));
        return awake;
    }

    /**
     * The foreground notification Android requires; false when Android 12+ refuses it (a restart
     * from the background without the battery-optimisation exemption): logged, and the service
     * then stops at its start.
     */
    private boolean goForeground(Notification n) {
        try {
            if (Build.VERSION.SDK_INT >= Build.VERSION_CODES.Q) {
                startForeground(NOTIFICATION, n, ServiceInfo.FOREGROUND_SERVICE_TYPE_DATA_SYNC);
            } else {
                startForeground(NOTIFICATION, n);
            }
            return true;
        } catch (IllegalStateException | SecurityException e) {
            Log.e(MainActivity.TAG, "cannot run in the foreground now (" + e + "): the device stops; unlock the phone"
                    + " and start it again, or exempt the app from battery optimisation (mjfl devices prepare)", null);
            return false;
        }
    }

    /**
     * START_REDELIVER_INTENT: a service killed by Android (for memory, or its process crashed)
     * comes back with the intent that started it, so an enrolled phone rejoins by itself within
     * seconds. START_STICKY would bring it back with no intent, hence no coordinator and no secret;
     * keeping them on disk instead would put the secret in a file (docs/security.md). Android
     * bounds the loop a crashing device could make: each start is redelivered at most six times
     * after onStartCommand returned, three times when it did not (ServiceRecord's
     * MAX_DONE_EXECUTING_COUNT and MAX_DELIVERY_COUNT), with growing delays; then it stays down
     * until the bridge starts it again, and the bridge's logcat file shows each crash. The
     * coordinator sees each death as a disconnect (the round's drop-out: failures are data). A
     * device that stops by itself (bye, refusal) calls stopSelfResult, so it is not redelivered.
     */
    @Override
    public int onStartCommand(Intent intent, int flags, int startId) {
        lastStartId = startId;
        if (!foreground) {
            stopSelfResult(startId);
            return START_NOT_STICKY;
        }
        if ((flags & START_FLAG_REDELIVERY) != 0) {
            Log.w(MainActivity.TAG, "restarted by Android after the app's process was killed: resuming the device");
        }
        DeviceRequest request;
        try {
            request = DeviceRequest.from(name -> intent == null ? null : intent.getStringExtra(name));
        } catch (IllegalArgumentException e) {
            Log.w(MainActivity.TAG, "service started without a usable request (" + e.getMessage() + "); nothing to do");
            if (!runs.running()) {
                stopSelfResult(startId);
            }
            return START_NOT_STICKY;
        }
        switch (runs.start(request)) {
            case NOTHING:
                break;
            case REPLACE:
                stopDevice();
                startDevice(request, runs.current());
                break;
            case RUN:
                startDevice(request, runs.current());
                break;
            default:
                throw new AssertionError();
        }
        return START_REDELIVER_INTENT;
    }

    private void startDevice(DeviceRequest request, long run) {
        board.started(request.deviceId(), request.url());
        stayAwake.enrolled(true);
        OkHttpClient client = http;
        if (request.pin() != null) {
            try {
                client = Tls.pinSha256(http.newBuilder(), request.pin()).build();
            } catch (java.security.GeneralSecurityException | IllegalArgumentException e) {
                Log.e(MainActivity.TAG, "bad certificate pin", e);
                deviceEnded(run, "not started: bad certificate pin: " + e.getMessage());
                return;
            }
        }
        ArtifactCache cache;
        try {
            cache = new ArtifactCache(new File(getFilesDir(), "artifacts").toPath());
        } catch (IOException e) {
            Log.e(MainActivity.TAG, "cannot open the artifact cache", e);
            deviceEnded(run, "not started: cannot open the artifact cache: " + e);
            return;
        }
        WakefulTrainer.WakeLock awake = ms -> wakeLock.acquire(ms);
        Clock clock = AndroidClock.ELAPSED; // the scale of TrainingTask.deadlineAt and of the heartbeats
        RuntimeLoadGuard guarded = new RuntimeLoadGuard(trainer, Arrays.asList(Build.SUPPORTED_ABIS));
        // Energy is read right around training: the wake lock's and the answer's time are not the task's.
        EnergyTrainer measured = new EnergyTrainer(guarded, () -> AndroidFacts.battery(this));
        DeviceConfig cfg = DeviceConfig.builder(request.url(), request.deviceId(),
                        new ReportingTrainer(new WakefulTrainer(measured, awake, clock), board), cache)
                .token(request.token())
                .secret(request.secret())
                .facts(new AndroidFacts(this, board, measured))
                .clock(clock)
                .build();
        Device d = new Device(cfg, client, timers);
        AtomicReference<String> cannotTrain = new AtomicReference<>();
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

            @Override
            public void cannotTrain(String why) {
                cannotTrain.set(why);
                Log.e(MainActivity.TAG, "no task can train on this phone: " + why, null);
            }
        });
        device = d;
        Thread runner = new Thread(() -> {
            Log.i(MainActivity.TAG, "device " + request);
            String last;
            try {
                Device.Stop stop = d.run();
                last = StatusText.stopped(stop, cannotTrain.get());
                Log.i(MainActivity.TAG, "device " + request.deviceId() + " stopped: " + stop + "; " + d.stats());
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                last = "stopped";
            } catch (RuntimeException | Error e) { // a bug: the service still ends cleanly
                Log.e(MainActivity.TAG, "device " + request.deviceId() + " stopped by an error", e);
                last = "stopped by an error: " + e;
            }
            String words = last;
            main.post(() -> deviceEnded(run, words));
        }, "mjfl-device");
        runner.start();
    }

    /**
     * On the main thread: the device of {@code run} stopped by itself. If it is still the
     * current one, the service stops (unless a start came in meanwhile: stopSelfResult keeps a
     * service started again since {@code lastStartId}).
     */
    private void deviceEnded(long run, String why) {
        if (!runs.ended(run)) {
            return; // replaced by a newer start: that device is the service's now
        }
        board.connection(why);
        device = null;
        stayAwake.enrolled(false);
        stopSelfResult(lastStartId);
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
    }

    @Override
    public void onDestroy() {
        board.unlisten(notifier);
        synchronized (notificationLock) {
            destroyed = true;
        }
        boolean wasRunning = runs.ended(runs.current()); // the runner's own end, posted later, is then a no-op
        stopDevice();
        stayAwake.enrolled(false);
        unregisterReceiver(power);
        // Never on the main thread: closing waits for a task in training to reach its next step.
        Background.close(trainer, "trainer", (line, e) -> Log.e(MainActivity.TAG, line, e));
        http.dispatcher().cancelAll();
        http.dispatcher().executorService().shutdown();
        http.connectionPool().evictAll();
        timers.shutdownNow();
        mjflLogger.removeHandler(logcat);
        if (wakeLock.isHeld()) {
            wakeLock.release();
        }
        stopForeground(STOP_FOREGROUND_REMOVE);
        getSystemService(NotificationManager.class).cancel(NOTIFICATION);
        if (wasRunning) { // else the screen keeps why the device stopped
            board.connection("not running");
        }
        super.onDestroy();
    }

    @Override
    public IBinder onBind(Intent intent) {
        return null;
    }

    private void updateNotification(StatusBoard.Status s) {
        String text = s.task() != null ? "training " + s.task() : s.connection();
        synchronized (notificationLock) {
            if (!destroyed) { // posted after onDestroy, it would stay as an ordinary notification
                getSystemService(NotificationManager.class).notify(NOTIFICATION, notification(text));
            }
        }
    }

    /** The extras of a {@link DeviceRequest}, on an intent for this service. */
    static Intent intent(android.content.Context context, DeviceRequest request) {
        Intent i = new Intent(context, DeviceService.class);
        for (Map.Entry<String, String> e : request.extras().entrySet()) {
            i.putExtra(e.getKey(), e.getValue());
        }
        return i;
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
