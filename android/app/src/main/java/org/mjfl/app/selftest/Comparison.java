package org.mjfl.app.selftest;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import org.mjfl.client.protocol.Tensor;

/**
 * How far a trained result lies from the expected one. Per tensor the relative difference
 * {@code max|actual - expected| / max|expected|} (in double; the Python side's
 * {@code golden.relative_difference} is the same), and the same of the mean loss.
 *
 * <p>Norm-wise rather than per element: a weight that rounds to 1e-9 on one machine and 3e-9 on
 * the other is 200% apart yet irrelevant; what matters is the tensor's error against its size.
 *
 * @param maxRelDiff the largest relative difference of any tensor (NaN when a value is NaN)
 * @param worst the tensor it was found in (null when there are none)
 * @param lossRelDiff the mean loss's relative difference
 * @param mismatch why the result cannot be compared at all (other names, shapes or count), or null
 */
public record Comparison(double maxRelDiff, String worst, double lossRelDiff, String mismatch) {
    /**
     * Whether the result is within {@code tolerance}: comparable, every tensor and the loss within
     * it. NaN never passes.
     */
    public boolean passes(double tolerance) {
        return mismatch == null && maxRelDiff <= tolerance && lossRelDiff <= tolerance;
    }

    /** Compares {@code actual} with {@code expected} tensor by tensor, in order. */
    public static Comparison of(List<Tensor> actual, double actualLoss, List<Tensor> expected, double expectedLoss) {
        if (!names(actual).equals(names(expected))) {
            return new Comparison(Double.NaN, null, Double.NaN,
                    "the result's tensors " + names(actual) + " are not the expected " + names(expected));
        }
        double loss = relativeDifference(new double[] {actualLoss}, new double[] {expectedLoss});
        double max = 0;
        String worst = null;
        for (int i = 0; i < actual.size(); i++) {
            Tensor a = actual.get(i);
            Tensor b = expected.get(i);
            if (!Arrays.equals(a.shape(), b.shape())) {
                return new Comparison(Double.NaN, a.name(), loss, "tensor " + a.name() + " has shape "
                        + Arrays.toString(a.shape()) + ", expected " + Arrays.toString(b.shape()));
            }
            double d = relativeDifference(a.toDoubles(), b.toDoubles());
            if (Double.isNaN(d)) {
                return new Comparison(Double.NaN, a.name(), loss, null);
            }
            if (worst == null || d > max) {
                max = d;
                worst = a.name();
            }
        }
        return new Comparison(max, worst, loss, null);
    }

    /** {@code max|a - b| / max|b|}: 0 when equal, infinity when only {@code b} is all zeros, NaN with a NaN. */
    public static double relativeDifference(double[] a, double[] b) {
        if (a.length != b.length) {
            throw new IllegalArgumentException(a.length + " values against " + b.length);
        }
        double diff = 0;
        double scale = 0;
        for (int i = 0; i < a.length; i++) {
            double d = Math.abs(a[i] - b[i]);
            if (Double.isNaN(d)) {
                return Double.NaN;
            }
            diff = Math.max(diff, d);
            scale = Math.max(scale, Math.abs(b[i]));
        }
        if (diff == 0) {
            return 0;
        }
        return scale > 0 ? diff / scale : Double.POSITIVE_INFINITY;
    }

    private static List<String> names(List<Tensor> tensors) {
        List<String> out = new ArrayList<>(tensors.size());
        for (Tensor t : tensors) {
            out.add(t.name());
        }
        return out;
    }
}
