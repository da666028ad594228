package org.mjfl.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Paths;
import org.junit.jupiter.api.Test;

class DeviceMainTest {
    @Test
    void parsesTheLaunchersOptions() {
        DeviceMain.Args a = DeviceMain.Args.parse(new String[] {"--url", "ws://h:1", "--count", "3", "--id-prefix=lab",
            "--token", "t", "--cache", "/tmp/c", "--seed", "7"});
        assertEquals("ws://h:1", a.url);
        assertEquals(3, a.count);
        assertEquals("lab", a.prefix);
        assertEquals("t", a.token);
        assertEquals(Paths.get("/tmp/c"), a.cache);
        assertEquals(7, a.seed);
        assertTrue(a.prefix.length() > 0);
        assertTrue(DeviceMain.Args.parse(new String[] {"--help"}).help);
        assertTrue(DeviceMain.Args.parse(new String[] {"--url", "ws://h:1", "--count", "1"}).prefix.startsWith("jvm-"));
        DeviceMain.Args one = DeviceMain.Args.parse(new String[] {"--url", "ws://h:1", "--id", "28041FDH2004TQ"});
        assertEquals("28041FDH2004TQ", one.id);
        assertEquals(1, one.count);
    }

    @Test
    void refusesBadArguments() {
        assertThrows(IllegalArgumentException.class, () -> DeviceMain.Args.parse(new String[] {"--count", "2"}));
        assertThrows(IllegalArgumentException.class, () -> DeviceMain.Args.parse(new String[] {"--url", "http://x", "--count", "2"}));
        assertThrows(IllegalArgumentException.class, () -> DeviceMain.Args.parse(new String[] {"--url", "ws://x", "--count", "0"}));
        assertThrows(IllegalArgumentException.class, () -> DeviceMain.Args.parse(new String[] {"--url", "ws://x", "--count", "two"}));
        assertThrows(IllegalArgumentException.class, () -> DeviceMain.Args.parse(new String[] {"--url", "ws://x", "--bogus", "1"}));
        assertThrows(IllegalArgumentException.class, () -> DeviceMain.Args.parse(new String[] {"--url"}));
        assertThrows(IllegalArgumentException.class, () -> DeviceMain.Args.parse(new String[] {"--url", "ws://x", "--id", "a", "--count", "2"}));
        assertThrows(IllegalArgumentException.class, () -> DeviceMain.Args.parse(new String[] {"--url", "ws://x", "--id", ""}));
    }

    @Test
    void helpSaysItIsAStandInTrainer() {
        assertTrue(DeviceMain.HELP.contains("STAND-IN TRAINER"));
        assertTrue(DeviceMain.HELP.contains("do NOT learn"));
    }

    @Test
    void cacheDirectoryNamesAreSafeAndDistinct() {
        assertEquals("jvm-host-0", DeviceMain.dirName("jvm-host-0"));
        String odd = DeviceMain.dirName("../a/b");
        assertTrue(odd.matches("[A-Za-z0-9._-]+") && !odd.startsWith("."), odd);
        assertNotEquals(DeviceMain.dirName("a/b"), DeviceMain.dirName("a_b"));
        assertTrue(DeviceMain.dirName("x".repeat(256)).length() < 100);
    }
}
