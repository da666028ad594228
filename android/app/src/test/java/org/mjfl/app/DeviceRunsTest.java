package org.mjfl.app;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.HashMap;
import java.util.Map;
import org.junit.jupiter.api.Test;

class DeviceRunsTest {
    static DeviceRequest request(String url) {
        return new DeviceRequest(url, "pixel-1", "", null, null);
    }

    @Test
    void theSameRequestAgainChangesNothingAnotherReplacesTheDevice() {
        DeviceRuns runs = new DeviceRuns();
        assertEquals(DeviceRuns.Start.RUN, runs.start(request("ws://127.0.0.1:8765")));
        long first = runs.current();
        assertEquals(DeviceRuns.Start.NOTHING, runs.start(request("ws://127.0.0.1:8765")));
        assertEquals(first, runs.current());
        assertEquals(DeviceRuns.Start.REPLACE, runs.start(request("ws://127.0.0.1:9000")));
        assertFalse(runs.ended(first), "a replaced device's end does not stop the service");
        assertTrue(runs.running());
    }

    @Test
    void aDeviceThatStopsByItselfStopsTheServiceOnceAndAStartRunsItAgain() {
        DeviceRuns runs = new DeviceRuns();
        runs.start(request("ws://127.0.0.1:8765"));
        long run = runs.current();
        assertTrue(runs.ended(run), "the coordinator's bye: the service stops");
        assertFalse(runs.running());
        assertFalse(runs.ended(run), "once");
        // The same request after the end: a new run, not ignored as "already running".
        assertEquals(DeviceRuns.Start.RUN, runs.start(request("ws://127.0.0.1:8765")));
        assertTrue(runs.current() > run);
    }

    @Test
    void aRequestNeedsAUrlAndAnIdAndKeepsItsSecretOutOfItsText() {
        Map<String, String> extras = new HashMap<>(Map.of("url", "ws://127.0.0.1:8765", "device_id", "pixel-1",
                "secret", "s3cret", "pin", ""));
        DeviceRequest r = DeviceRequest.from(extras::get);
        assertEquals(new DeviceRequest("ws://127.0.0.1:8765", "pixel-1", "", "s3cret", null), r);
        assertEquals(Map.of("url", "ws://127.0.0.1:8765", "device_id", "pixel-1", "token", "", "secret", "s3cret"),
                r.extras());
        assertEquals(r, DeviceRequest.from(r.extras()::get), "the service reads what the activity wrote");
        assertFalse(r.toString().contains("s3cret"), r.toString());
        assertNull(DeviceRequest.from(Map.of("url", "wss://h:1", "device_id", "d")::get).secret());
        assertThrows(IllegalArgumentException.class, () -> DeviceRequest.from(Map.of("url", "ws://h:1")::get));
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> DeviceRequest.from(Map.of("url", "http://h:1", "device_id", "d")::get));
        assertTrue(e.getMessage().contains("ws:// or wss://"), e.getMessage());
    }
}
