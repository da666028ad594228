package org.mjfl.app.selftest;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class MemoryProbeTest {
    @TempDir
    Path tmp;

    @Test
    void thePeakIsVmHwmInBytes() {
        String status = "Name:\tjava\nVmPeak:\t 9000 kB\nVmHWM:\t   123456 kB\nVmRSS:\t 100 kB\n";
        assertEquals(123456L * 1024, MemoryProbe.vmHwmBytes(status));
        assertEquals(-1, MemoryProbe.vmHwmBytes("Name:\tjava\n"));
    }

    @Test
    void aResetWritesFiveToClearRefsAndAMissingFileIsUnknown() throws Exception {
        MemoryProbe probe = MemoryProbe.proc(tmp);
        assertEquals(-1, probe.peakBytes());
        assertTrue(probe.resetPeak());
        assertEquals("5", Files.readString(tmp.resolve("clear_refs")));
        Files.writeString(tmp.resolve("status"), "VmHWM:\t 2048 kB\n");
        assertEquals(2L << 20, probe.peakBytes());
        assertFalse(MemoryProbe.proc(tmp.resolve("gone")).resetPeak());
    }

    @Test
    void onLinuxThisProcessHasAPeak() {
        if (Files.isReadable(Path.of("/proc/self/status"))) {
            assertTrue(MemoryProbe.proc().peakBytes() > 1 << 20);
        }
    }
}
