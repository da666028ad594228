package org.mjfl.client.protocol;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import com.google.gson.JsonObject;
import java.io.BufferedReader;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.Random;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/** Section 2's JSON: the strict reader, the Python-compatible writer, Python's float repr. */
class JsonTest {
    @ParameterizedTest
    @ValueSource(strings = {
        "", "[]", "\"x\"", "{", "{\"a\":1,}", "{\"a\":01}", "{\"a\":1.}", "{\"a\":NaN}", "{\"a\":Infinity}",
        "{'a':1}", "{a:1}", "{\"a\":1} x", "{\"a\":1}{}", "{\"a\":\"\\'\"}", "{\"a\":\"\\x41\"}",
        "{\"a\":\"tab\there\"}", "{\"a\":\"nl\nhere\"}", "{\"a\":\"\\ud800\"}", "{\"a\":\"\\udc00x\"}",
        "{\"a\":1,\"a\":2}", "{\"a\":tru}", "{\"a\":\"\\u12\"}", "{\"a\":[1 2]}"
    })
    void malformedJsonIsBadMessage(String text) {
        ProtocolException e = assertThrows(ProtocolException.class, () -> StrictJson.parseObject(text));
        assertEquals(Codes.BAD_MESSAGE, e.code());
    }

    @Test
    void rawLoneSurrogateIsRefused() {
        assertEquals(Codes.BAD_MESSAGE, assertThrows(ProtocolException.class,
                () -> StrictJson.parseObject("{\"a\":\"x\ud800\"}")).code());
    }

    @Test
    void deepNestingIsRefusedNotAStackOverflow() {
        String deep = "{\"a\":" + "[".repeat(100_000) + "]".repeat(100_000) + "}";
        assertEquals(Codes.BAD_MESSAGE, assertThrows(ProtocolException.class, () -> StrictJson.parseObject(deep)).code());
    }

    @Test
    void anyValidLayoutAndUtf8AreAccepted() {
        JsonObject o = StrictJson.parseObject(" {\n\t\"a\" : [ 1 , -0 , 1E5 ] ,\r\n \"b\":\"\u00e9\\u00e9\\ud83d\\ude00\ud83d\ude00\\/\" } \n");
        assertEquals("1E5", o.getAsJsonArray("a").get(2).getAsNumber().toString(), "numbers keep their text");
        assertEquals("\u00e9\u00e9\ud83d\ude00\ud83d\ude00/", o.get("b").getAsString());
    }

    @Test
    void writerEscapesLikePythonEnsureAscii() {
        StringBuilder sb = new StringBuilder();
        PyJson.string(sb, "a\"b\\c\n\r\t\b\f\u0001\u001f\u007f\u00e9\u20ac\ud83d\ude00 ~/<>&'");
        // json.dumps("a\"b\\c\n\r\t\b\f\x01\x1f\x7f\u00e9\u20ac\U0001F600 ~/<>&'")
        assertEquals("\"a\\\"b\\\\c\\n\\r\\t\\b\\f\\u0001\\u001f\\u007f\\u00e9\\u20ac\\ud83d\\ude00 ~/<>&'\"", sb.toString());
    }

    @Test
    void freeFormNumbersKeepTheirSpelling() {
        JsonObject o = StrictJson.parseObject("{\"a\":1.50,\"b\":-0,\"c\":1e3,\"d\":[true,null,\"x\"]}");
        assertEquals("{\"o\":{\"a\":1.50,\"b\":-0,\"c\":1e3,\"d\":[true,null,\"x\"]}}",
                new PyJson().beginObject().key("o").element("o", o).endObject().toString());
    }

    /** 3,000 doubles with Python's repr, made by python3 (resource pyrepr.txt). */
    @Test
    void floatsFormatAsPythonReprDoes() throws Exception {
        int n = 0;
        try (InputStream in = getClass().getResourceAsStream("pyrepr.txt");
                BufferedReader r = new BufferedReader(new InputStreamReader(in, StandardCharsets.US_ASCII))) {
            for (String line; (line = r.readLine()) != null; ) {
                if (line.startsWith("#")) {
                    continue;
                }
                String[] f = line.split(" ");
                double d = Double.longBitsToDouble(Long.parseUnsignedLong(f[0], 16));
                assertEquals(f[1], PyFloat.repr(d), "bits " + f[0]);
                n++;
            }
        }
        assertEquals(3000, n);
    }

    @Test
    void reprReadsBackToTheSameDouble() {
        Random rng = new Random(7);
        for (int i = 0; i < 20_000; i++) {
            double d = Double.longBitsToDouble(rng.nextLong());
            if (Double.isFinite(d)) {
                assertEquals(d, Double.parseDouble(PyFloat.repr(d)));
            }
        }
    }

    @Test
    void textLimitsCountCodePoints() {
        String emoji = "\ud83d\ude00";
        assertEquals(2, Text.chars(emoji + "a"));
        assertEquals(emoji, Text.cutChars(emoji + emoji, 1));
        assertEquals("ab", Text.cutUtf8("ab\u00e9", 3), "never cuts inside a code point");
        assertEquals(4 + 2 + 1, Text.utf8Length(emoji + "\u00e9a"));
    }
}
