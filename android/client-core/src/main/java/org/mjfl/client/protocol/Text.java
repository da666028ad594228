package org.mjfl.client.protocol;

import java.nio.charset.StandardCharsets;

/** String limits of sections 2 and 5.9, counted as the spec counts them. */
public final class Text {
    private Text() {}

    /**
     * Characters as section 2 counts them: Unicode code points (Python's {@code len}), not
     * UTF-16 units. The spec does not say which; code points are what the reference writes.
     */
    public static int chars(String s) {
        return s.codePointCount(0, s.length());
    }

    /** Cut to at most {@code maxChars} code points (a reason, section 2). */
    public static String cutChars(String s, int maxChars) {
        if (chars(s) <= maxChars) {
            return s;
        }
        return s.substring(0, s.offsetByCodePoints(0, maxChars));
    }

    /** Cut to at most {@code maxBytes} UTF-8 bytes on a code point boundary (close reasons, 5.9). */
    public static String cutUtf8(String s, int maxBytes) {
        if (utf8Length(s) <= maxBytes) {
            return s;
        }
        int bytes = 0;
        int i = 0;
        while (i < s.length()) {
            int cp = s.codePointAt(i);
            int len = new String(Character.toChars(cp)).getBytes(StandardCharsets.UTF_8).length;
            if (bytes + len > maxBytes) {
                break;
            }
            bytes += len;
            i += Character.charCount(cp);
        }
        return s.substring(0, i);
    }

    /** UTF-8 length without encoding; a lone surrogate counts as 3 bytes. */
    public static long utf8Length(String s) {
        long n = 0;
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (c < 0x80) {
                n += 1;
            } else if (c < 0x800) {
                n += 2;
            } else if (Character.isHighSurrogate(c) && i + 1 < s.length() && Character.isLowSurrogate(s.charAt(i + 1))) {
                n += 4;
                i++;
            } else {
                n += 3;
            }
        }
        return n;
    }

    static String quote(String s) {
        return "\"" + cutChars(s, 64) + "\"";
    }
}
