package org.mjfl.app;

import android.app.Activity;
import android.content.Intent;
import android.os.Bundle;
import android.os.PowerManager;
import android.util.Log;
import android.widget.TextView;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.Consumer;
import org.mjfl.app.selftest.SelfTest;

/**
 * Runs the self-test of the first-day check (docs/phones.md, "First-day check") on a golden set
 * that {@code mjfl devices check} pushed, and shows its lines:
 *
 * <pre>adb shell am start -n org.mjfl.app/.SelfTestActivity --es run RUN --es dir /data/local/tmp/mjfl-selftest/KEY</pre>
 *
 * The lines go to logcat under {@link SelfTest#TAG}, tagged with {@code run}, where mjfl reads
 * them. Like the device's own start, only callers holding {@code android.permission.DUMP} (the
 * adb shell) may start it (manifest). One self-test runs at a time; a start while one runs gets
 * a {@code busy} line. A partial wake lock keeps the phone training with its screen off.
 */
public final class SelfTestActivity extends Activity {
    public static final String EXTRA_RUN = "run";
    public static final String EXTRA_DIR = "dir";
    /** The golden set trains in a minute or two on a phone; a stuck one must not keep it awake. */
    private static final long LOCK_LIMIT_MS = 30 * 60 * 1000L;
    /** The run in progress, null when none: the process's, whichever activity started it. */
    private static final AtomicReference<String> RUNNING = new AtomicReference<>();
    /** The screen of the activity shown last (lines of a test started by an earlier one reach it too). */
    private static volatile Consumer<String> screen = line -> {};

    private TextView text;
    private final StringBuilder shown = new StringBuilder();

    @Override
    protected void onCreate(Bundle savedInstanceState) {
        super.onCreate(savedInstanceState);
        text = new TextView(this);
        text.setPadding(32, 32, 32, 32);
        text.setTextIsSelectable(true);
        setContentView(text);
        screen = this::show;
        if (savedInstanceState == null) { // not a recreation (a rotation) of one already started
            start(getIntent());
        }
    }

    @Override
    protected void onNewIntent(Intent intent) {
        super.onNewIntent(intent);
        setIntent(intent);
        start(intent);
    }

    private void start(Intent intent) {
        String run = intent.getStringExtra(EXTRA_RUN);
        String dir = intent.getStringExtra(EXTRA_DIR);
        if (run == null || dir == null) {
            show("self-test: start it with the extras run and dir (mjfl devices check does)");
            return;
        }
        String other;
        synchronized (RUNNING) { // AtomicReference.compareAndExchange is API 33
            other = RUNNING.get();
            if (other == null) {
                RUNNING.set(run);
            }
        }
        if (other != null) {
            if (other.equals(run)) {
                return; // the same start delivered again: it runs already
            }
            String line = SelfTest.busy(run, other);
            Log.i(SelfTest.TAG, line);
            show(line);
            return;
        }
        PowerManager power = getSystemService(PowerManager.class);
        PowerManager.WakeLock lock = power == null ? null : power.newWakeLock(PowerManager.PARTIAL_WAKE_LOCK, "mjfl:selftest");
        if (lock != null) {
            lock.setReferenceCounted(false);
            lock.acquire(LOCK_LIMIT_MS); // released when the test ends; never held past this
        }
        Path work = getFilesDir().toPath().resolve("selftest");
        SelfTest test = AndroidSelfTest.create(getApplicationContext(), line -> screen.accept(line));
        Thread worker = new Thread(() -> {
            try {
                test.run(run, Paths.get(dir), work);
            } catch (RuntimeException | Error e) {
                Log.e(MainActivity.TAG, "the self-test stopped", e);
            } finally {
                if (lock != null && lock.isHeld()) {
                    lock.release();
                }
                RUNNING.set(null);
            }
        }, "mjfl-selftest");
        worker.start();
    }

    private void show(String line) {
        runOnUiThread(() -> {
            shown.append(line).append('\n');
            text.setText(shown);
        });
    }
}
