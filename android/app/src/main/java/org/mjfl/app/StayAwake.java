package org.mjfl.app;

import java.util.function.Consumer;

/**
 * Keeps the CPU awake while a device is enrolled (its service runs a device) and the phone is on
 * power, and at no other time. Plain Java: {@link DeviceService} feeds it the two facts and
 * adapts a partial wake lock.
 *
 * <p>Why: a phone whose CPU suspends stops its heartbeat timers (they run on a clock that stops in
 * suspend) and answers the coordinator only when a packet wakes it; a coordinator that hears
 * nothing for {@code heartbeat_timeout_s} (60 s) drops it. A lab phone stays enrolled for days
 * between tasks, so it must stay reachable, not only while it trains ({@link WakefulTrainer}).
 *
 * <p>Battery cost: a partial wake lock keeps the CPU out of suspend with the screen off; an idle
 * awake phone draws tens of mA more than a suspended one (roughly 20 to 80 mA, 0.1 to 0.3 W,
 * by model), which its charger supplies. Held only on power: a phone on battery (the energy set-up,
 * over wireless debugging) is not kept awake by the app, so its measured energy is training's, and
 * it relies on the coordinator's packets waking it (protocol.md section 10).
 */
final class StayAwake {
    /** The wake lock as this class uses it. */
    interface Lock {
        void acquire();

        void release();
    }

    private final Lock lock;
    private final Consumer<String> log;
    private boolean enrolled;
    private boolean onPower;
    private boolean held;

    /** @param log one line each time the lock is taken or let go (logcat, tag MJFL) */
    StayAwake(Lock lock, Consumer<String> log) {
        this.lock = lock;
        this.log = log;
    }

    /** A device started (true) or stopped (false). */
    synchronized void enrolled(boolean v) {
        enrolled = v;
        apply();
    }

    /** The battery broadcast's power state ({@link DeviceState#onPower}); null (unknown) counts as off. */
    synchronized void onPower(Boolean v) {
        onPower = Boolean.TRUE.equals(v);
        apply();
    }

    synchronized boolean held() {
        return held;
    }

    private void apply() {
        boolean want = enrolled && onPower;
        if (want == held) {
            return;
        }
        if (want) {
            lock.acquire();
            log.accept("staying awake: enrolled and on power (released when unplugged or stopped)");
        } else {
            lock.release();
            log.accept(enrolled ? "letting the phone sleep: on battery" : "letting the phone sleep: no device runs");
        }
        held = want;
    }
}
