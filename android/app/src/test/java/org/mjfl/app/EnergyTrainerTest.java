package org.mjfl.app;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Deque;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.mjfl.client.train.TrainingResult;

class EnergyTrainerTest {
    final List<String> log = new ArrayList<>();
    final Deque<Integer> charges = new ArrayDeque<>(List.of(3_002_000, 3_000_000, 2_999_750, 2_999_500));

    BatteryEnergy.Reading read() {
        log.add("battery");
        return BatteryEnergyTest.unplugged(charges.pop(), 4000);
    }

    @Test
    void theBatteryIsReadJustBeforeAndAfterTrainingAndTheMeasurementTakenOnce() throws Exception {
        EnergyTrainer t = new EnergyTrainer((task, cancelled) -> {
            log.add("training");
            return new TrainingResult(List.of(), 1, 0.5, 1);
        }, this::read);
        t.train(Tasks.dueAt(10.0), () -> false);
        assertEquals(List.of("battery", "training", "battery"), log);
        assertEquals(28.8, t.take("t-7").energyJ(), 1e-9); // 2 mAh at 4 V
        assertNull(t.take("t-7"), "one result, one measurement");
    }

    @Test
    void theResolutionIsTheSmallestStepOfTheCounterSeenSoFar() throws Exception {
        EnergyTrainer t = new EnergyTrainer((task, cancelled) -> new TrainingResult(List.of(), 1, 0.5, 1), this::read);
        t.train(Tasks.dueAt(10.0), () -> false);
        // The first task's readings differ by 2 mAh: the step is at most that.
        assertEquals(28.8, t.take("t-7").resolutionJ(), 1e-9);
        t.train(Tasks.dueAt(10.0), () -> false);
        // 3_000_000 -> 2_999_750 between the tasks, then 250 µAh again: one step is 250 µAh, 3.6 J at 4 V.
        BatteryEnergy.Measurement m = t.take("t-7");
        assertEquals(3.6, m.resolutionJ(), 1e-9);
        assertEquals(3.6, m.energyJ(), 1e-9);
    }

    @Test
    void aTaskThatFailsLeavesNoMeasurement() {
        EnergyTrainer t = new EnergyTrainer((task, cancelled) -> {
            throw new IllegalStateException("broken program");
        }, this::read);
        assertThrows(IllegalStateException.class, () -> t.train(Tasks.dueAt(10.0), () -> false));
        assertNull(t.take("t-7"));
    }

    @Test
    void measurementsNobodyTookAreForgottenPastABound() throws Exception {
        EnergyTrainer t = new EnergyTrainer((task, cancelled) -> new TrainingResult(List.of(), 1, 0.5, 1),
                () -> BatteryEnergyTest.unplugged(1_000_000, 4000));
        t.train(Tasks.dueAt(10.0), () -> false);
        for (int i = 0; i < EnergyTrainer.KEPT; i++) {
            t.train(Tasks.withId("other-" + i), () -> false);
        }
        assertNull(t.take("t-7"), "the oldest of KEPT + 1 is dropped");
        assertEquals(0.0, t.take("other-0").energyJ());
    }
}
