package org.mjfl.app;

import android.app.ActivityManager;
import android.content.Context;
import org.mjfl.app.training.MemoryBudget;

/**
 * The memory a phone can give training programs now: {@code ActivityManager.MemoryInfo.availMem}
 * less the system's low-memory {@code threshold} (below it Android starts killing processes) and
 * a margin for what the budget does not itemise (the runtime's own allocations, the answer's
 * frames); and the room left in the app's Java heap ({@code Runtime.maxMemory()}, the heap's cap,
 * less what is in use), where the task's Java copies go.
 */
public final class AndroidMemory implements MemoryBudget {
    /** Room kept for what MemoryNeed does not count (the runtime's own, the answer's frames). */
    public static final long MARGIN_BYTES = 64L << 20;

    private final ActivityManager activities;

    public AndroidMemory(Context context) {
        this.activities = context.getSystemService(ActivityManager.class);
    }

    @Override
    public long availableBytes() {
        if (activities == null) {
            return Long.MAX_VALUE; // no ActivityManager (never on a phone): nothing to go by
        }
        ActivityManager.MemoryInfo info = new ActivityManager.MemoryInfo();
        activities.getMemoryInfo(info);
        return info.availMem - info.threshold - MARGIN_BYTES;
    }

    @Override
    public long heapBytes() {
        Runtime r = Runtime.getRuntime();
        return r.maxMemory() - (r.totalMemory() - r.freeMemory());
    }
}
