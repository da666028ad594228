package org.mjfl.client.net;

import java.util.Random;

/**
 * Reconnect delays (testbed.md section 3): {@code min(max, initial * factor^attempt)}, less up
 * to {@code jitter} of it at random, so that a fleet that lost its coordinator at once does not
 * come back at once. The caller counts attempts and resets them after a welcomed session.
 * Not final so that a test can record the attempts asked for.
 */
public class Backoff {
    public static final double INITIAL_S = 0.5;
    public static final double FACTOR = 2;
    public static final double MAX_S = 30;
    public static final double JITTER = 0.5;

    private final double initialS;
    private final double factor;
    private final double maxS;
    private final double jitter;
    private final Random random;

    public Backoff(double initialS, double factor, double maxS, double jitter, Random random) {
        if (!(initialS >= 0 && factor >= 1 && maxS >= initialS && jitter >= 0 && jitter <= 1)) {
            throw new IllegalArgumentException("backoff needs 0 <= initial <= max, factor >= 1, jitter in [0, 1]");
        }
        this.initialS = initialS;
        this.factor = factor;
        this.maxS = maxS;
        this.jitter = jitter;
        this.random = random;
    }

    /** The defaults: 0.5 s, x2, at most 30 s, up to 50% less. */
    public static Backoff defaults(Random random) {
        return new Backoff(INITIAL_S, FACTOR, MAX_S, JITTER, random);
    }

    /** Seconds to wait before attempt {@code attempt} (0 for the first retry). */
    public double delay(int attempt) {
        double base = Math.min(maxS, initialS * Math.pow(factor, Math.max(0, attempt)));
        return base * (1 - jitter * random.nextDouble());
    }
}
