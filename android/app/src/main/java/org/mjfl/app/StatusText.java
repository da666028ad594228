package org.mjfl.app;

/** The screen's text for a status. */
final class StatusText {
    private StatusText() {}

    static String of(StatusBoard.Status s) {
        StringBuilder b = new StringBuilder("mjfl device\n\n");
        if (s.deviceId() == null) {
            b.append("Not started. Start with the extras url, device_id and token:\n\n")
                    .append("adb shell am start -n org.mjfl.app/.MainActivity --es url ws://127.0.0.1:8765 ")
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
