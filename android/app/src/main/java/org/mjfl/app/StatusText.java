package org.mjfl.app;

import org.mjfl.client.Device;

/** The screen's text for a status. */
final class StatusText {
    private StatusText() {}

    /** The component only the adb shell may start (the manifest protects it with DUMP). */
    static final String START_ACTIVITY = "org.mjfl.app/.StartActivity";

    /** The connection line once the device stopped by itself; {@code why}: its cannot-train reason, or null. */
    static String stopped(Device.Stop stop, String why) {
        switch (stop) {
            case COORDINATOR_BYE:
                return "stopped: the coordinator said bye (start the app over adb again to reconnect)";
            case REFUSED:
                return "stopped: refused (unauthorized or no common protocol version)";
            case CANNOT_TRAIN:
                return "stopped: no task can train on this phone: " + why;
            default:
                return "stopped";
        }
    }

    static String of(StatusBoard.Status s) {
        StringBuilder b = new StringBuilder("mjfl device\n\n");
        if (s.deviceId() == null) {
            b.append("Not started. Start it over adb with the extras url, device_id and token:\n\n")
                    .append("adb shell am start -n ").append(START_ACTIVITY).append(" --es url ws://127.0.0.1:8765 ")
                    .append("--es device_id phone-01 --es token \"\"\n");
            return b.toString();
        }
        b.append("Device: ").append(s.deviceId()).append('\n')
                .append("Coordinator: ").append(s.url()).append('\n')
                .append("Connection: ").append(s.connection()).append("\n\n")
                .append("Training: ").append(s.task() == null ? "idle" : s.task()).append('\n')
                .append("Last answer: ").append(s.lastAnswer() == null ? "none yet" : s.lastAnswer()).append('\n')
                .append("Device state: ").append(s.deviceState() == null ? "not read yet" : s.deviceState())
                .append('\n');
        return b.toString();
    }
}
