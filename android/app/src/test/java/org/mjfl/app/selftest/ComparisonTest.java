package org.mjfl.app.selftest;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import org.junit.jupiter.api.Test;
import org.mjfl.client.protocol.Tensor;

class ComparisonTest {
    private static Tensor t(String name, float... v) {
        return Tensor.ofFloats(name, new long[] {v.length}, v);
    }

    @Test
    void theDifferenceIsTheLargestAgainstTheTensorsLargestValue() {
        // The same examples as tests/device/emulated/test_golden.py.
        assertEquals(0.0, Comparison.relativeDifference(new double[] {1, -2}, new double[] {1, -2}));
        assertEquals(0.25, Comparison.relativeDifference(new double[] {1.5, -2}, new double[] {1, -2}));
        assertEquals(Double.POSITIVE_INFINITY, Comparison.relativeDifference(new double[] {1e-9}, new double[] {0}));
        assertEquals(0.0, Comparison.relativeDifference(new double[] {0}, new double[] {0}));
        assertTrue(Double.isNaN(Comparison.relativeDifference(new double[] {Double.NaN}, new double[] {1})));
    }

    @Test
    void theWorstTensorIsNamedAndTheToleranceDecides() {
        Comparison c = Comparison.of(List.of(t("a", 1, 2), t("b", 10.01f)), 0.5, List.of(t("a", 1, 2), t("b", 10)), 0.5);
        assertEquals("b", c.worst());
        assertEquals(1e-3, c.maxRelDiff(), 1e-6);
        assertTrue(c.passes(1e-2));
        assertFalse(c.passes(1e-4));
        assertNull(c.mismatch());
    }

    @Test
    void aLossOffFailsEvenWithTheSameWeights() {
        Comparison c = Comparison.of(List.of(t("a", 1)), 0.6, List.of(t("a", 1)), 0.5);
        assertEquals(0.0, c.maxRelDiff());
        assertFalse(c.passes(1e-4));
    }

    @Test
    void otherNamesOrShapesCannotBeCompared() {
        Comparison names = Comparison.of(List.of(t("a", 1)), 0.5, List.of(t("b", 1)), 0.5);
        assertTrue(names.mismatch().contains("[a] are not the expected [b]"), names.mismatch());
        assertFalse(names.passes(1));
        Comparison shapes = Comparison.of(List.of(t("a", 1, 2)), 0.5, List.of(t("a", 1)), 0.5);
        assertEquals("tensor a has shape [2], expected [1]", shapes.mismatch());
    }

    @Test
    void aNanAnywhereFails() {
        Comparison c = Comparison.of(List.of(t("a", 1), t("b", Float.NaN), t("c", 5)), 0.5,
                List.of(t("a", 1), t("b", 1), t("c", 1)), 0.5);
        assertTrue(Double.isNaN(c.maxRelDiff()));
        assertEquals("b", c.worst());
        assertFalse(c.passes(Double.MAX_VALUE));
    }
}
