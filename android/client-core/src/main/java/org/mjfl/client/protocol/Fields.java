package org.mjfl.client.protocol;

import com.google.gson.JsonArray;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonPrimitive;
import java.math.BigInteger;
import java.util.regex.Pattern;

/**
 * Typed reads of one JSON object's fields under the rules of section 2; every failure is a
 * {@link ProtocolException} with the given code (bad_message for message fields,
 * bad_tensor_table for table entries). Unknown fields are never looked at.
 */
final class Fields {
    static final int MAX_ID = 256;
    static final int MAX_REASON = 1024;
    private static final BigInteger LONG_MAX = BigInteger.valueOf(Long.MAX_VALUE);
    private static final Pattern SHA256 = Pattern.compile("[0-9a-f]{64}");

    private final JsonObject o;
    private final String where;
    private final String code;

    Fields(JsonObject o, String where, String code) {
        this.o = o;
        this.where = where;
        this.code = code;
    }

    static Fields of(JsonObject o, String where) {
        return new Fields(o, where, Codes.BAD_MESSAGE);
    }

    ProtocolException fail(String what) {
        return new ProtocolException(code, where + ": " + what);
    }

    /** Section 2: a listed field must be present (null only where "or null"). */
    JsonElement get(String k) {
        JsonElement e = o.get(k);
        if (e == null) {
            throw fail("missing field " + k);
        }
        return e;
    }

    boolean isNull(String k) {
        JsonElement e = o.get(k);
        return e == null || e.isJsonNull();
    }

    String string(String k, int maxChars) {
        JsonElement e = get(k);
        if (!e.isJsonPrimitive() || !e.getAsJsonPrimitive().isString()) {
            throw fail(k + " must be a string");
        }
        String s = e.getAsString();
        if (Text.chars(s) > maxChars) {
            throw fail(k + " longer than " + maxChars + " characters");
        }
        return s;
    }

    /** Section 2: an id is 1 to 256 characters. */
    String id(String k) {
        String s = string(k, MAX_ID);
        if (s.isEmpty()) {
            throw fail(k + " is empty");
        }
        return s;
    }

    String optId(String k) {
        return isNull(k) ? null : id(k); // "or null" fields may be absent (section 2)
    }

    String code(String k) {
        String s = string(k, 64);
        if (!Codes.isCode(s)) {
            throw fail(k + " is not a code ([a-z][a-z0-9_]{0,63})");
        }
        return s;
    }

    String reason(String k) {
        return string(k, MAX_REASON);
    }

    String sha256(String k) {
        String s = string(k, 64);
        if (!SHA256.matcher(s).matches()) {
            throw fail(k + " is not 64 lowercase hex digits");
        }
        return s;
    }

    /** Section 2: an int has no fraction or exponent and lies in [min, max]. */
    long integer(String k, long min, long max) {
        return integerOf(get(k), k, min, max);
    }

    long integer(String k) {
        return integer(k, 0, Long.MAX_VALUE);
    }

    Long optInteger(String k, long min, long max) {
        return isNull(k) ? null : integer(k, min, max);
    }

    long integerOf(JsonElement e, String k, long min, long max) {
        String text = numberText(e, k);
        if (text.indexOf('.') >= 0 || text.indexOf('e') >= 0 || text.indexOf('E') >= 0) {
            throw fail(k + " must be an int");
        }
        BigInteger v = new BigInteger(text);
        if (v.compareTo(BigInteger.valueOf(min)) < 0 || v.compareTo(BigInteger.valueOf(max)) > 0
                || v.compareTo(LONG_MAX) > 0) {
            throw fail(k + " must be an int in [" + min + ", " + max + "]");
        }
        return v.longValue();
    }

    /** Section 2: a number is any finite JSON number. */
    double number(String k) {
        double v = Double.parseDouble(numberText(get(k), k));
        if (!Double.isFinite(v)) {
            throw fail(k + " is not finite");
        }
        return v;
    }

    double number(String k, double min, boolean minExclusive) {
        double v = number(k);
        if (v < min || (minExclusive && v == min)) {
            throw fail(k + " must be " + (minExclusive ? "> " : ">= ") + PyFloat.repr(min));
        }
        return v;
    }

    Double optNumber(String k, double min, boolean minExclusive) {
        return isNull(k) ? null : number(k, min, minExclusive);
    }

    JsonObject object(String k) {
        JsonElement e = get(k);
        if (!e.isJsonObject()) {
            throw fail(k + " must be an object");
        }
        return e.getAsJsonObject();
    }

    JsonArray array(String k, int maxItems) {
        JsonElement e = get(k);
        if (!e.isJsonArray()) {
            throw fail(k + " must be a list");
        }
        JsonArray a = e.getAsJsonArray();
        if (a.size() > maxItems) {
            throw fail(k + " has more than " + maxItems + " items");
        }
        return a;
    }

    private String numberText(JsonElement e, String k) {
        if (!e.isJsonPrimitive()) {
            throw fail(k + " must be a number");
        }
        JsonPrimitive p = e.getAsJsonPrimitive();
        if (!p.isNumber()) { // true/false are never numbers (section 2)
            throw fail(k + " must be a number");
        }
        return p.getAsNumber().toString();
    }
}
