package org.mjfl.client.protocol;

import com.google.gson.JsonArray;
import com.google.gson.JsonElement;
import com.google.gson.JsonNull;
import com.google.gson.JsonObject;
import com.google.gson.JsonPrimitive;
import com.google.gson.internal.LazilyParsedNumber;
import com.google.gson.stream.JsonReader;
import com.google.gson.stream.JsonToken;
import java.io.IOException;
import java.io.StringReader;
import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;

/**
 * RFC 8259 JSON reader for section 2, on Gson's streaming reader in strict mode. It builds the
 * tree itself (Gson's {@code JsonParser} turns leniency on) so that it can refuse what strict
 * Gson 2.10 still lets through: raw control characters in strings, the {@code \'} escape, lone
 * surrogates (also as {@code \ud800} escapes), duplicate names. Numbers keep their text, so an
 * int field can tell {@code 1} from {@code 1.0}.
 */
final class StrictJson {
    private StrictJson() {}

    /** Deeper nesting is refused; protocol v1 nests at most three levels (free-form objects aside). */
    static final int MAX_DEPTH = 64;

    /** Decodes UTF-8 strictly (a JSON header of a binary message, section 2). */
    static String utf8(ByteBuffer bytes) {
        try {
            return StandardCharsets.UTF_8
                    .newDecoder()
                    .onMalformedInput(CodingErrorAction.REPORT)
                    .onUnmappableCharacter(CodingErrorAction.REPORT)
                    .decode(bytes)
                    .toString();
        } catch (CharacterCodingException e) {
            throw ProtocolException.badMessage("JSON is not valid UTF-8");
        }
    }

    /** One JSON object, nothing before or after it but whitespace. */
    static JsonObject parseObject(String text) {
        checkLexical(text);
        JsonReader r = new JsonReader(new StringReader(text));
        r.setLenient(false);
        try {
            if (r.peek() != JsonToken.BEGIN_OBJECT) {
                throw ProtocolException.badMessage("not a JSON object");
            }
            JsonElement e = read(r, 0);
            if (r.peek() != JsonToken.END_DOCUMENT) {
                throw ProtocolException.badMessage("data after the JSON object");
            }
            return e.getAsJsonObject();
        } catch (IOException | IllegalStateException | NumberFormatException e) {
            throw ProtocolException.badMessage("malformed JSON");
        }
    }

    private static JsonElement read(JsonReader r, int depth) throws IOException {
        if (depth > MAX_DEPTH) {
            throw ProtocolException.badMessage("JSON nested deeper than " + MAX_DEPTH);
        }
        switch (r.peek()) {
            case BEGIN_OBJECT: {
                JsonObject o = new JsonObject();
                r.beginObject();
                while (r.hasNext()) {
                    String name = checkUnicode(r.nextName());
                    if (o.has(name)) {
                        throw ProtocolException.badMessage("duplicate field " + Text.quote(name));
                    }
                    o.add(name, read(r, depth + 1));
                }
                r.endObject();
                return o;
            }
            case BEGIN_ARRAY: {
                JsonArray a = new JsonArray();
                r.beginArray();
                while (r.hasNext()) {
                    a.add(read(r, depth + 1));
                }
                r.endArray();
                return a;
            }
            case STRING:
                return new JsonPrimitive(checkUnicode(r.nextString()));
            case NUMBER:
                return new JsonPrimitive(new LazilyParsedNumber(r.nextString()));
            case BOOLEAN:
                return new JsonPrimitive(r.nextBoolean());
            case NULL:
                r.nextNull();
                return JsonNull.INSTANCE;
            default:
                throw ProtocolException.badMessage("malformed JSON");
        }
    }

    /**
     * RFC 8259 section 7: control characters are escaped inside strings and only the listed
     * escapes exist. Control characters outside strings are refused by Gson itself.
     */
    private static void checkLexical(String s) {
        boolean inString = false;
        int n = s.length();
        for (int i = 0; i < n; i++) {
            char c = s.charAt(i);
            if (!inString) {
                inString = c == '"';
            } else if (c == '"') {
                inString = false;
            } else if (c < 0x20) {
                throw ProtocolException.badMessage("control character in a JSON string");
            } else if (c == '\\') {
                char e = i + 1 < n ? s.charAt(i + 1) : 0;
                if ("\"\\/bfnrtu".indexOf(e) < 0 || e == 0) {
                    throw ProtocolException.badMessage("malformed JSON");
                }
                i++; // \\uXXXX: the hex digits are checked by Gson
            }
        }
    }

    /** Section 2: valid Unicode, no lone surrogates. */
    static String checkUnicode(String s) {
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (Character.isHighSurrogate(c)) {
                if (i + 1 < s.length() && Character.isLowSurrogate(s.charAt(i + 1))) {
                    i++;
                    continue;
                }
                throw ProtocolException.badMessage("lone surrogate in a JSON string");
            }
            if (Character.isLowSurrogate(c)) {
                throw ProtocolException.badMessage("lone surrogate in a JSON string");
            }
        }
        return s;
    }
}
