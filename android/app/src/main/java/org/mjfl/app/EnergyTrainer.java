package org.mjfl.app;

import java.util.LinkedHashMap;
import java.util.Map;
import java.util.function.BooleanSupplier;
import java.util.function.Supplier;
import org.mjfl.client.train.Trainer;
import org.mjfl.client.train.TrainingResult;
import org.mjfl.client.train.TrainingTask;

/**
 * A {@link Trainer} that reads the battery just before and just after a task trains, and keeps
 * the task's {@link BatteryEnergy.Measurement} until its result is written ({@link #take}: {@link
 * AndroidFacts#resultExtras} puts it in {@code device_state}). A task that fails leaves none.
 */
public final class EnergyTrainer implements Trainer {
    /** Measurements of tasks whose result was never written (cancelled ones) are dropped past this. */
    static final int KEPT = 16;

    private final Trainer inner;
    private final Supplier<BatteryEnergy.Reading> battery;
    private final BatteryEnergy.CounterStep step = new BatteryEnergy.CounterStep();
    private final Map<String, BatteryEnergy.Measurement> measured = new LinkedHashMap<>() {
        @Override
        protected boolean removeEldestEntry(Map.Entry<String, BatteryEnergy.Measurement> eldest) {
            return size() > KEPT;
        }
    };

    /** @param battery one reading now; null when the phone has no battery broadcast */
    public EnergyTrainer(Trainer inner, Supplier<BatteryEnergy.Reading> battery) {
        this.inner = inner;
        this.battery = battery;
    }

    @Override
    public TrainingResult train(TrainingTask task, BooleanSupplier cancelled) throws Exception {
        BatteryEnergy.Reading before = read();
        TrainingResult r = inner.train(task, cancelled);
        BatteryEnergy.Measurement m = BatteryEnergy.between(before, read(), step);
        synchronized (measured) {
            measured.put(task.taskId(), m);
        }
        return r;
    }

    /** One reading, its counter noted to learn the gauge's step (failed tasks' readings count too). */
    private BatteryEnergy.Reading read() {
        BatteryEnergy.Reading r = battery.get();
        if (r != null && r.counted()) {
            step.observe(BatteryEnergy.microAmpHours(r.counter()));
        }
        return r;
    }

    /** The measurement of task {@code taskId}, once; null if it has none. */
    public BatteryEnergy.Measurement take(String taskId) {
        synchronized (measured) {
            return measured.remove(taskId);
        }
    }
}
