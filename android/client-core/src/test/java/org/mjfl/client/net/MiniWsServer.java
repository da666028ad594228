package org.mjfl.client.net;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;

import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.EOFException;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.util.Base64;
import java.util.Locale;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import org.mjfl.client.protocol.Codec;
import org.mjfl.client.protocol.Message;
import org.mjfl.client.protocol.Parts;

/**
 * A tiny RFC 6455 WebSocket server for tests, on a plain ServerSocket: the opening handshake
 * (section 4.2), frames in and out (section 5; clients mask, servers do not), fragmented
 * messages, ping/pong and the closing handshake (section 5.5.1). It plays the coordinator by
 * hand; each accepted connection is a {@link Peer}.
 */
public final class MiniWsServer implements AutoCloseable {
    /** Bound on every wait for the device: only a stalled machine reaches it. */
    public static final long WAIT_S = 20;

    private final ServerSocket server;
    private final BlockingQueue<Peer> peers = new LinkedBlockingQueue<>();

    public MiniWsServer() throws IOException {
        server = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
        Thread t = new Thread(this::acceptLoop, "mini-ws-accept");
        t.setDaemon(true);
        t.start();
    }

    public String url() {
        return "ws://127.0.0.1:" + server.getLocalPort();
    }

    /** The next connection (handshake done). */
    public Peer accept() throws InterruptedException {
        Peer p = peers.poll(WAIT_S, TimeUnit.SECONDS);
        assertNotNull(p, "no connection within " + WAIT_S + " s");
        return p;
    }

    /** Connections accepted and not yet taken by {@link #accept()}. */
    public int waiting() {
        return peers.size();
    }

    @Override
    public void close() throws IOException {
        server.close();
        for (Peer p : peers) {
            p.drop();
        }
    }

    private void acceptLoop() {
        while (!server.isClosed()) {
            try {
                Socket s = server.accept();
                try {
                    peers.add(new Peer(s));
                } catch (IOException e) {
                    s.close();
                }
            } catch (IOException e) {
                return; // closed
            }
        }
    }

    /** One frame or whole message received; opcode -1 marks the end of the connection. */
    public record Frame(int opcode, byte[] payload) {
        public static final int TEXT = 1;
        public static final int BINARY = 2;
        public static final int CLOSE = 8;

        public String text() {
            return new String(payload, StandardCharsets.UTF_8);
        }

        public int closeCode() {
            return payload.length >= 2 ? ((payload[0] & 0xff) << 8) | (payload[1] & 0xff) : 1005;
        }
    }

    public static final class Peer {
        private final Socket socket;
        private final DataInputStream in;
        private final OutputStream out;
        private final BlockingQueue<Frame> frames = new LinkedBlockingQueue<>();
        private final Parts.Reassembler parts = new Parts.Reassembler(1, null, null);
        private boolean closeSent;

        Peer(Socket socket) throws IOException {
            this.socket = socket;
            this.in = new DataInputStream(socket.getInputStream());
            this.out = socket.getOutputStream();
            handshake();
            Thread t = new Thread(this::readLoop, "mini-ws-peer");
            t.setDaemon(true);
            t.start();
        }

        private void handshake() throws IOException {
            String key = null;
            for (String line; !(line = readLine(in)).isEmpty(); ) {
                int colon = line.indexOf(':');
                if (colon > 0 && line.substring(0, colon).trim().toLowerCase(Locale.ROOT).equals("sec-websocket-key")) {
                    key = line.substring(colon + 1).trim();
                }
            }
            if (key == null) {
                throw new IOException("not a WebSocket handshake");
            }
            String accept;
            try {
                accept = Base64.getEncoder().encodeToString(MessageDigest.getInstance("SHA-1")
                        .digest((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").getBytes(StandardCharsets.US_ASCII)));
            } catch (java.security.NoSuchAlgorithmException e) {
                throw new IOException(e);
            }
            out.write(("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                    + "Sec-WebSocket-Accept: " + accept + "\r\n\r\n").getBytes(StandardCharsets.US_ASCII));
            out.flush();
        }

        private static String readLine(InputStream in) throws IOException {
            ByteArrayOutputStream b = new ByteArrayOutputStream();
            for (int c; (c = in.read()) != '\n'; ) {
                if (c < 0) {
                    throw new EOFException();
                }
                if (c != '\r') {
                    b.write(c);
                }
            }
            return b.toString(StandardCharsets.US_ASCII);
        }

        private void readLoop() {
            ByteArrayOutputStream message = null;
            int messageOpcode = 0;
            try {
                while (true) {
                    int b0 = in.readUnsignedByte();
                    int b1 = in.readUnsignedByte();
                    boolean fin = (b0 & 0x80) != 0;
                    int opcode = b0 & 0x0f;
                    long len = b1 & 0x7f;
                    if (len == 126) {
                        len = in.readUnsignedShort();
                    } else if (len == 127) {
                        len = in.readLong();
                    }
                    byte[] mask = new byte[4];
                    if ((b1 & 0x80) != 0) {
                        in.readFully(mask);
                    }
                    byte[] payload = new byte[(int) len];
                    in.readFully(payload);
                    for (int i = 0; i < payload.length; i++) {
                        payload[i] ^= mask[i & 3];
                    }
                    if (opcode == 9) {
                        send(10, payload);
                    } else if (opcode == Frame.CLOSE) {
                        frames.add(new Frame(Frame.CLOSE, payload));
                        synchronized (this) {
                            if (!closeSent) {
                                send(Frame.CLOSE, payload.length >= 2 ? new byte[] {payload[0], payload[1]} : new byte[0]);
                            }
                        }
                    } else if (opcode == 1 || opcode == 2) {
                        if (fin) {
                            frames.add(new Frame(opcode, payload));
                        } else {
                            message = new ByteArrayOutputStream();
                            message.write(payload);
                            messageOpcode = opcode;
                        }
                    } else if (opcode == 0 && message != null) {
                        message.write(payload);
                        if (fin) {
                            frames.add(new Frame(messageOpcode, message.toByteArray()));
                            message = null;
                        }
                    }
                }
            } catch (IOException e) {
                frames.add(new Frame(-1, new byte[0]));
            }
        }

        /** The next frame or message the device sent. */
        public Frame next() throws InterruptedException {
            Frame f = frames.poll(WAIT_S, TimeUnit.SECONDS);
            assertNotNull(f, "nothing from the device within " + WAIT_S + " s");
            return f;
        }

        /** The next protocol message (parts joined); fails on a close or the end of the connection. */
        public Message nextMessage() throws InterruptedException {
            while (true) {
                Frame f = next();
                if (f.opcode() == Frame.TEXT) {
                    return Codec.decodeText(f.text());
                }
                if (f.opcode() != Frame.BINARY) {
                    throw new AssertionError("expected a message, got frame " + f.opcode() + " " + f.closeCode());
                }
                ByteBuffer whole = parts.feed(ByteBuffer.wrap(f.payload()));
                if (whole != null) {
                    return Codec.decodeBinary(whole, 1, null);
                }
            }
        }

        /** The next message of this type, skipping heartbeats and acks. */
        public <T extends Message> T next(Class<T> type) throws InterruptedException {
            while (true) {
                Message m = nextMessage();
                if (type.isInstance(m)) {
                    return type.cast(m);
                }
                if (!(m instanceof Message.Heartbeat) && !(m instanceof Message.HeartbeatAck)) {
                    throw new AssertionError("expected " + type.getSimpleName() + ", got " + m);
                }
            }
        }

        /** Expects the device's bye (skipping heartbeats) and then its close frame with this code. */
        public Message.Bye expectByeAndClose(String code, int closeCode) throws InterruptedException {
            Message.Bye bye = next(Message.Bye.class);
            assertEquals(code, bye.code(), bye.reason());
            Frame f = next();
            assertEquals(Frame.CLOSE, f.opcode());
            assertEquals(closeCode, f.closeCode());
            return bye;
        }

        public void sendText(String s) throws IOException {
            send(Frame.TEXT, s.getBytes(StandardCharsets.UTF_8));
        }

        public void sendBinary(ByteBuffer b) throws IOException {
            ByteBuffer d = b.duplicate();
            byte[] bytes = new byte[d.remaining()];
            d.get(bytes);
            send(Frame.BINARY, bytes);
        }

        /** A bye and the close frame, as a coordinator ends a session (5.9). */
        public void sayBye(String code, String reason, int closeCode) throws IOException {
            sendText(Codec.encodeText(new Message.Bye(code, reason)));
            ByteBuffer c = ByteBuffer.allocate(2).order(ByteOrder.BIG_ENDIAN).putShort((short) closeCode);
            synchronized (this) {
                closeSent = true;
                send(Frame.CLOSE, c.array());
            }
        }

        /** Drops the TCP connection without a word (a crash or a network cut). */
        public void drop() {
            try {
                socket.close();
            } catch (IOException ignored) {
                // already gone
            }
        }

        private synchronized void send(int opcode, byte[] payload) throws IOException {
            ByteArrayOutputStream b = new ByteArrayOutputStream(payload.length + 10);
            b.write(0x80 | opcode);
            if (payload.length < 126) {
                b.write(payload.length);
            } else if (payload.length < 65536) {
                b.write(126);
                b.write(payload.length >> 8);
                b.write(payload.length & 0xff);
            } else {
                b.write(127);
                b.write(ByteBuffer.allocate(8).putLong(payload.length).array());
            }
            b.write(payload);
            out.write(b.toByteArray());
            out.flush();
        }
    }
}
