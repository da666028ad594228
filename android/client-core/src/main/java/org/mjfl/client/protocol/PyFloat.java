package org.mjfl.client.protocol;

import java.math.BigDecimal;
import java.math.MathContext;
import java.math.RoundingMode;

/**
 * Formats a double as Python's {@code repr(float)} (and so {@code json.dumps}) does: the
 * shortest decimal that reads back to the same double, the nearest such one to its exact
 * value, in fixed notation when the decimal exponent lies in (-4, 16] ({@code 10.0},
 * {@code 0.0001}) and else as {@code 1e-05} / {@code 1e+16}. Java 17's {@code Double.toString}
 * is neither always shortest (fixed in Java 19) nor in this layout, so the golden frames could
 * not match with it.
 */
public final class PyFloat {
    private PyFloat() {}

    public static String repr(double d) {
        if (!Double.isFinite(d)) {
            throw new IllegalArgumentException("not a finite number: " + d);
        }
        if (d == 0) {
            return Double.doubleToRawLongBits(d) < 0 ? "-0.0" : "0.0";
        }
        BigDecimal shortest = shortest(d).stripTrailingZeros();
        String digits = shortest.unscaledValue().abs().toString();
        int n = digits.length();
        int decpt = n - shortest.scale(); // value = 0.digits x 10^decpt
        StringBuilder sb = new StringBuilder(24);
        if (d < 0) {
            sb.append('-');
        }
        if (decpt > -4 && decpt <= 16) {
            if (decpt <= 0) {
                sb.append("0.");
                zeros(sb, -decpt).append(digits);
            } else if (decpt >= n) {
                zeros(sb.append(digits), decpt - n).append(".0");
            } else {
                sb.append(digits, 0, decpt).append('.').append(digits, decpt, n);
            }
        } else {
            sb.append(digits.charAt(0));
            if (n > 1) {
                sb.append('.').append(digits, 1, n);
            }
            int exp = decpt - 1;
            sb.append('e').append(exp < 0 ? '-' : '+');
            int a = Math.abs(exp);
            if (a < 10) {
                sb.append('0');
            }
            sb.append(a);
        }
        return sb.toString();
    }

    /** String.repeat is Java 11 and missing below Android API 33: client-core runs there too. */
    private static StringBuilder zeros(StringBuilder sb, int n) {
        for (int i = 0; i < n; i++) {
            sb.append('0');
        }
        return sb;
    }

    /** Fewest significant digits that read back as d; of those, the nearest to d's exact value. */
    private static BigDecimal shortest(double d) {
        BigDecimal exact = new BigDecimal(d);
        for (int p = 1; p <= 17; p++) {
            BigDecimal best = null;
            // The nearest p-digit decimal, then its neighbours: at a power of two the interval
            // that reads back is lopsided, so a farther neighbour may read back when it does not.
            for (RoundingMode mode : new RoundingMode[] {RoundingMode.HALF_EVEN, RoundingMode.DOWN, RoundingMode.UP}) {
                BigDecimal c = exact.round(new MathContext(p, mode));
                if (Double.parseDouble(c.toString()) == d
                        && (best == null || c.subtract(exact).abs().compareTo(best.subtract(exact).abs()) < 0)) {
                    best = c;
                }
            }
            if (best != null) {
                return best;
            }
        }
        return exact.round(MathContext.DECIMAL64); // unreachable: 17 digits always read back
    }
}
