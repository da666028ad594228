package org.mjfl.client.protocol;

/**
 * IEEE 754 binary16 conversions for {@code float16} tensors (section 3's table names
 * {@code Float.float16ToFloat}, which Java 17 and Android lack).
 */
public final class Half {
    private Half() {}

    /** The float value of half-precision bits (exact: every half is a float). */
    public static float toFloat(short bits) {
        int h = bits & 0xffff;
        int sign = (h & 0x8000) << 16;
        int exp = (h >>> 10) & 0x1f;
        int mant = h & 0x3ff;
        if (exp == 0) {
            float v = mant * 0x1p-24f; // zero or subnormal: mant units of 2^-24
            return sign == 0 ? v : -v;
        }
        if (exp == 31) {
            return Float.intBitsToFloat(sign | 0x7f800000 | (mant << 13));
        }
        return Float.intBitsToFloat(sign | ((exp + 112) << 23) | (mant << 13));
    }

    /** The nearest half (ties to even), as numpy's {@code astype(float16)} rounds. */
    public static short fromFloat(float v) {
        int f = Float.floatToRawIntBits(v);
        int sign = (f >>> 16) & 0x8000;
        int abs = f & 0x7fffffff;
        if (abs >= 0x7f800000) { // inf or NaN (NaN keeps a quiet payload bit)
            return (short) (sign | 0x7c00 | (abs > 0x7f800000 ? 0x200 : 0));
        }
        if (abs >= 0x47800000) { // >= 2^16: beyond the largest half even after rounding
            return (short) (sign | 0x7c00);
        }
        if (abs < 0x38800000) { // below 2^-14: a subnormal half; x * 2^24 is exact in a double
            return (short) (sign | (int) Math.rint(Float.intBitsToFloat(abs) * 0x1p24));
        }
        int h = (((abs >>> 23) - 112) << 10) | ((abs & 0x7fffff) >>> 13);
        int rest = abs & 0x1fff;
        if (rest > 0x1000 || (rest == 0x1000 && (h & 1) == 1)) {
            h++; // a carry into the exponent is the correct rounding, up to infinity
        }
        return (short) (sign | h);
    }

    /** Infinity and NaN have all exponent bits set. */
    public static boolean isFinite(short bits) {
        return (bits & 0x7c00) != 0x7c00;
    }
}
