package org.mjfl.client.protocol;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Random;
import org.junit.jupiter.api.Test;

class HalfTest {
    @Test
    void everyHalfRoundTripsThroughFloat() {
        for (int h = 0; h < 0x10000; h++) {
            float f = Half.toFloat((short) h);
            if (Float.isNaN(f)) {
                assertTrue((h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0);
                continue;
            }
            assertEquals(h, Half.fromFloat(f) & 0xffff, "half " + Integer.toHexString(h));
        }
    }

    @Test
    void roundsToNearestTiesToEven() {
        assertEquals(0x3c00, Half.fromFloat(1 + 0x1p-11f) & 0xffff, "tie between 1 and 1+2^-10 -> even");
        assertEquals(0x3c02, Half.fromFloat(1 + 3 * 0x1p-11f) & 0xffff, "tie -> even upward");
        assertEquals(0x7bff, Half.fromFloat(65519f) & 0xffff);
        assertEquals(0x7c00, Half.fromFloat(65520f) & 0xffff, "rounds to infinity");
        assertEquals(0x0001, Half.fromFloat(0x1p-24f) & 0xffff, "smallest subnormal");
        assertEquals(0x0000, Half.fromFloat(0x1p-25f) & 0xffff, "tie with 0 -> 0");
        assertEquals(0x8000, Half.fromFloat(-0f) & 0xffff);
        Random rng = new Random(3);
        for (int i = 0; i < 200_000; i++) {
            float f = (rng.nextFloat() * 2 - 1) * (float) Math.pow(2, rng.nextInt(40) - 26);
            short h = Half.fromFloat(f);
            double err = Math.abs(Half.toFloat(h) - (double) f);
            for (int step : new int[] {-1, 1}) {
                short n = (short) (h + step);
                if (Half.isFinite(n) && (n & 0x7fff) != 0x7c00 && Integer.signum(n) == Integer.signum(h)) {
                    double other = Math.abs(Half.toFloat(n) - (double) f);
                    assertTrue(err < other || (err == other && (h & 1) == 0), "nearest half of " + f);
                }
            }
        }
    }
}
