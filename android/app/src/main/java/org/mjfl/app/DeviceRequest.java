package org.mjfl.app;

import java.util.LinkedHashMap;
import java.util.Map;
import java.util.function.Function;

/**
 * What the device is started with: the string extras of {@code am start -n
 * org.mjfl.app/.StartActivity} (docs/phones.md, section 5), passed on to {@link DeviceService}.
 *
 * @param url the coordinator, {@code ws://} or {@code wss://}
 * @param deviceId the device's stable name (its adb serial)
 * @param token the lab's shared token; empty for none
 * @param secret the enrolled secret the hello proves (protocol.md 5.1.1); null for none
 * @param pin for {@code wss://}: the sha256 of the coordinator's certificate; null for none
 */
record DeviceRequest(String url, String deviceId, String token, String secret, String pin) {
    static final String URL = "url";
    static final String DEVICE_ID = "device_id";
    static final String TOKEN = "token";
    static final String SECRET = "secret";
    static final String PIN = "pin";

    /**
     * From extras read by {@code extra} (null where absent); IllegalArgumentException naming what
     * is missing or wrong.
     */
    static DeviceRequest from(Function<String, String> extra) {
        String url = extra.apply(URL);
        String id = extra.apply(DEVICE_ID);
        if (url == null || url.isEmpty() || id == null || id.isEmpty()) {
            throw new IllegalArgumentException("the extras url and device_id are needed");
        }
        if (!url.startsWith("ws://") && !url.startsWith("wss://")) {
            throw new IllegalArgumentException("url must be ws:// or wss://, got " + url);
        }
        return new DeviceRequest(url, id, orEmpty(extra.apply(TOKEN)), orNull(extra.apply(SECRET)), orNull(extra.apply(PIN)));
    }

    /** The extras that carry it (absent ones left out). */
    Map<String, String> extras() {
        Map<String, String> m = new LinkedHashMap<>();
        m.put(URL, url);
        m.put(DEVICE_ID, deviceId);
        m.put(TOKEN, token);
        if (secret != null) {
            m.put(SECRET, secret);
        }
        if (pin != null) {
            m.put(PIN, pin);
        }
        return m;
    }

    /** Never the token or the secret: for logs and the screen. */
    @Override
    public String toString() {
        return deviceId + " -> " + url;
    }

    private static String orEmpty(String s) {
        return s == null ? "" : s;
    }

    private static String orNull(String s) {
        return s == null || s.isEmpty() ? null : s;
    }
}
