package org.mjfl.client.protocol;

import com.google.gson.JsonArray;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonPrimitive;
import com.google.gson.internal.LazilyParsedNumber;
import java.math.BigInteger;
import java.util.Map;

/**
 * Writes JSON as the Python reference does ({@code json.dumps(obj, separators=(",", ":"))},
 * {@code ensure_ascii}): compact, ASCII only, everything outside {@code ' '..'~'} escaped as
 * {@code \\uXXXX} (lowercase hex), ints without fraction, numbers as {@link PyFloat#repr}.
 * Gson's own writer escapes HTML characters and leaves non-ASCII as is, hence this class.
 */
final class PyJson {
    private final StringBuilder sb = new StringBuilder(256);
    private boolean comma;

    PyJson beginObject() {
        sep();
        sb.append('{');
        comma = false;
        return this;
    }

    PyJson endObject() {
        sb.append('}');
        comma = true;
        return this;
    }

    PyJson beginArray() {
        sep();
        sb.append('[');
        comma = false;
        return this;
    }

    PyJson endArray() {
        sb.append(']');
        comma = true;
        return this;
    }

    PyJson key(String name) {
        sep();
        string(sb, name);
        sb.append(':');
        comma = false;
        return this;
    }

    PyJson value(String s) {
        if (s == null) {
            return nullValue();
        }
        sep();
        string(sb, s);
        comma = true;
        return this;
    }

    PyJson value(long v) {
        sep();
        sb.append(v);
        comma = true;
        return this;
    }

    /** A number field; non-finite values are refused (section 2). */
    PyJson number(String field, double v) {
        if (!Double.isFinite(v)) {
            throw ProtocolException.badMessage("field " + field + " is not finite");
        }
        sep();
        sb.append(PyFloat.repr(v));
        comma = true;
        return this;
    }

    PyJson number(String field, Double v) {
        return v == null ? nullValue() : number(field, v.doubleValue());
    }

    PyJson value(Long v) {
        return v == null ? nullValue() : value(v.longValue());
    }

    PyJson nullValue() {
        sep();
        sb.append("null");
        comma = true;
        return this;
    }

    /** A free-form value (e.g. {@code hardware}); numbers read from the wire keep their text. */
    PyJson element(String field, JsonElement e) {
        if (e == null || e.isJsonNull()) {
            return nullValue();
        }
        if (e.isJsonObject()) {
            beginObject();
            for (Map.Entry<String, JsonElement> m : ((JsonObject) e).entrySet()) {
                key(m.getKey());
                element(field, m.getValue());
            }
            return endObject();
        }
        if (e.isJsonArray()) {
            beginArray();
            for (JsonElement x : (JsonArray) e) {
                element(field, x);
            }
            return endArray();
        }
        JsonPrimitive p = e.getAsJsonPrimitive();
        if (p.isBoolean()) {
            sep();
            sb.append(p.getAsBoolean());
            comma = true;
            return this;
        }
        if (p.isString()) {
            return value(p.getAsString());
        }
        Number n = p.getAsNumber();
        if (n instanceof LazilyParsedNumber) {
            String text = n.toString();
            if (!Double.isFinite(Double.parseDouble(text))) {
                throw ProtocolException.badMessage("field " + field + " holds a number that is not finite");
            }
            sep();
            sb.append(text);
            comma = true;
            return this;
        }
        if (n instanceof Long || n instanceof Integer || n instanceof Short || n instanceof Byte
                || n instanceof BigInteger) {
            sep();
            sb.append(n);
            comma = true;
            return this;
        }
        return number(field, n.doubleValue()); // Double, Float, BigDecimal
    }

    @Override
    public String toString() {
        return sb.toString();
    }

    private void sep() {
        if (comma) {
            sb.append(',');
        }
    }

    private static final char[] HEX = "0123456789abcdef".toCharArray();

    static void string(StringBuilder sb, String s) {
        sb.append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"':
                    sb.append("\\\"");
                    break;
                case '\\':
                    sb.append("\\\\");
                    break;
                case '\n':
                    sb.append("\\n");
                    break;
                case '\r':
                    sb.append("\\r");
                    break;
                case '\t':
                    sb.append("\\t");
                    break;
                case '\b':
                    sb.append("\\b");
                    break;
                case '\f':
                    sb.append("\\f");
                    break;
                default:
                    if (c >= 0x20 && c <= 0x7e) {
                        sb.append(c);
                    } else {
                        sb.append("\\u").append(HEX[c >> 12]).append(HEX[(c >> 8) & 15])
                                .append(HEX[(c >> 4) & 15]).append(HEX[c & 15]);
                    }
            }
        }
        sb.append('"');
    }
}
