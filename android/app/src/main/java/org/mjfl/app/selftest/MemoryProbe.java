package org.mjfl.app.selftest;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * The process's peak memory while a case trains: the high-water mark of its resident set
 * ({@code VmHWM} in {@code /proc/self/status}), everything the process touched, the runtime's
 * planned memory, the weights and the Java heap alike.
 */
public interface MemoryProbe {
    /** Starts a new peak, if the system lets it; returns whether it did. */
    boolean resetPeak();

    /** Bytes of the peak since the last reset (since the process started, if it never did); -1 unknown. */
    long peakBytes();

    /** A probe that knows nothing (a system without /proc). */
    MemoryProbe NONE = new MemoryProbe() {
        @Override
        public boolean resetPeak() {
            return false;
        }

        @Override
        public long peakBytes() {
            return -1;
        }
    };

    /**
     * Linux's: {@code VmHWM} of {@code /proc/self/status}, reset by writing 5 to
     * {@code /proc/self/clear_refs} (Linux 4.0+, proc(5): "reset the peak resident set size").
     * Where the write is refused, the peak is the process's since it started.
     */
    static MemoryProbe proc() {
        return proc(Paths.get("/proc/self"));
    }

    /** {@link #proc()} over another folder laid out like {@code /proc/self} (tests). */
    static MemoryProbe proc(Path self) {
        return new MemoryProbe() {
            @Override
            public boolean resetPeak() {
                try {
                    Files.write(self.resolve("clear_refs"), new byte[] {'5'});
                    return true;
                } catch (IOException | SecurityException e) {
                    return false;
                }
            }

            @Override
            public long peakBytes() {
                try {
                    return vmHwmBytes(new String(Files.readAllBytes(self.resolve("status")), StandardCharsets.UTF_8));
                } catch (IOException | SecurityException e) {
                    return -1;
                }
            }
        };
    }

    /** {@code VmHWM:   123456 kB} in a /proc status text, in bytes; -1 when it is not there. */
    static long vmHwmBytes(String status) {
        Matcher m = Pattern.compile("^VmHWM:\\s+(\\d+)\\s*kB", Pattern.MULTILINE).matcher(status);
        return m.find() ? Long.parseLong(m.group(1)) * 1024 : -1;
    }
}
