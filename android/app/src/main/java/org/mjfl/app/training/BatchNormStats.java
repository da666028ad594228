package org.mjfl.app.training;

/**
 * Batch-norm running statistics kept on the host (docs/models.md, "Batch-norm statistics"):
 * after each step, for layer {@code l} with batch mean {@code m}, biased batch variance
 * {@code v} and {@code count = N * batch_norm_pixels[l]}:
 * {@code num_batches_tracked += 1}, {@code running_mean = 0.9 running_mean + 0.1 m},
 * {@code running_var = 0.9 running_var + 0.1 v count / (count - 1)}, as {@code nn.BatchNorm2d}
 * (momentum 0.1, unbiased variance) does.
 *
 * <p>The float32 arithmetic is operation for operation that of mjfl's Python trainer
 * ({@code ExecuTorchTrainer._update_running}), so both give the same bits.
 */
public final class BatchNormStats {
    /** nn.BatchNorm2d's default momentum, the weight of the batch's statistics. */
    public static final float MOMENTUM = 0.1f;

    private final float[][] runningMean;
    private final float[][] runningVar;
    private final double[] tracked;
    private final long[] pixels;

    /**
     * @param runningMean each layer's running_mean (updated in place)
     * @param runningVar each layer's running_var (updated in place)
     * @param tracked each layer's num_batches_tracked
     * @param pixels each layer's batch_norm_pixels
     */
    public BatchNormStats(float[][] runningMean, float[][] runningVar, double[] tracked, long[] pixels) {
        if (runningVar.length != runningMean.length || tracked.length != runningMean.length
                || pixels.length != runningMean.length) {
            throw new IllegalArgumentException("one mean, variance, count and pixel count per layer");
        }
        this.runningMean = runningMean;
        this.runningVar = runningVar;
        this.tracked = tracked;
        this.pixels = pixels;
    }

    public int layers() {
        return runningMean.length;
    }

    /**
     * Folds one step's statistics of layer {@code l} into its running averages.
     *
     * @param batch N, the step's number of samples
     */
    public void update(int l, float[] batchMean, float[] biasedVar, int batch) {
        float[] mean = runningMean[l];
        float[] var = runningVar[l];
        if (batchMean.length != mean.length || biasedVar.length != var.length) {
            throw new IllegalArgumentException("layer " + l + " has " + mean.length + " channels, the step reported "
                    + batchMean.length + " and " + biasedVar.length);
        }
        long count = batch * pixels[l];
        // numpy: np.float32(count / max(count - 1, 1)), a double quotient rounded once.
        float unbias = (float) ((double) count / Math.max(count - 1, 1));
        float keep = 1f - MOMENTUM;
        for (int c = 0; c < mean.length; c++) {
            mean[c] = mean[c] * keep + MOMENTUM * batchMean[c];
            var[c] = var[c] * keep + MOMENTUM * (biasedVar[c] * unbias);
        }
        tracked[l] += 1;
    }

    public float[] runningMean(int l) {
        return runningMean[l];
    }

    public float[] runningVar(int l) {
        return runningVar[l];
    }

    public double tracked(int l) {
        return tracked[l];
    }
}
