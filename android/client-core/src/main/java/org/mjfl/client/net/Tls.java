package org.mjfl.client.net;

import java.io.IOException;
import java.io.InputStream;
import java.security.GeneralSecurityException;
import java.security.KeyStore;
import java.security.MessageDigest;
import java.security.cert.Certificate;
import java.security.cert.CertificateException;
import java.security.cert.CertificateFactory;
import java.security.cert.X509Certificate;
import java.util.Locale;
import javax.net.ssl.SSLContext;
import javax.net.ssl.TrustManager;
import javax.net.ssl.TrustManagerFactory;
import javax.net.ssl.X509TrustManager;
import okhttp3.OkHttpClient;
import org.mjfl.client.protocol.Sha256;

/**
 * {@code wss://} to a lab coordinator (docs/security.md): trust exactly the lab's CA, or pin the
 * coordinator's certificate by its sha256. Never the system's CAs plus ours: a lab coordinator has
 * no public certificate, and trusting every public CA lets anyone with one for the name in.
 */
public final class Tls {
    private Tls() {}

    /** Trust only the certificates of a PEM stream ({@code ca.pem} of {@code mjfl certs create}). */
    public static OkHttpClient.Builder trustPem(OkHttpClient.Builder b, InputStream pem)
            throws IOException, GeneralSecurityException {
        KeyStore store = KeyStore.getInstance(KeyStore.getDefaultType());
        store.load(null, null);
        int n = 0;
        for (Certificate c : CertificateFactory.getInstance("X.509").generateCertificates(pem)) {
            store.setCertificateEntry("mjfl-" + n++, c);
        }
        if (n == 0) {
            throw new CertificateException("no certificate in the PEM file");
        }
        TrustManagerFactory f = TrustManagerFactory.getInstance(TrustManagerFactory.getDefaultAlgorithm());
        f.init(store);
        X509TrustManager tm = (X509TrustManager) f.getTrustManagers()[0];
        return b.sslSocketFactory(context(tm).getSocketFactory(), tm);
    }

    /**
     * Trust exactly the certificate whose DER encoding has this sha256 (64 hex digits): how the
     * app pins the coordinator ({@code --es pin}). The pinned certificate is the identity, so the
     * host name is not checked against it (a phone reaches the coordinator as 127.0.0.1 over adb).
     */
    public static OkHttpClient.Builder pinSha256(OkHttpClient.Builder b, String sha256) throws GeneralSecurityException {
        String pin = sha256.toLowerCase(Locale.ROOT);
        if (!pin.matches("[0-9a-f]{64}")) {
            throw new IllegalArgumentException("pin must be 64 hex digits (sha256 of the certificate), got " + sha256);
        }
        X509TrustManager tm = new Pinned(pin);
        return b.sslSocketFactory(context(tm).getSocketFactory(), tm).hostnameVerifier((host, session) -> true);
    }

    private static SSLContext context(X509TrustManager tm) throws GeneralSecurityException {
        SSLContext ssl = SSLContext.getInstance("TLS");
        ssl.init(null, new TrustManager[] {tm}, null);
        return ssl;
    }

    /** Accepts a server whose own certificate hashes to the pin; nothing else. */
    static final class Pinned implements X509TrustManager {
        private final byte[] pin;

        Pinned(String pin) {
            this.pin = pin.getBytes(java.nio.charset.StandardCharsets.US_ASCII);
        }

        @Override
        public void checkServerTrusted(X509Certificate[] chain, String authType) throws CertificateException {
            if (chain == null || chain.length == 0) {
                throw new CertificateException("no server certificate");
            }
            chain[0].checkValidity();
            String got = Sha256.hex(Sha256.digest().digest(chain[0].getEncoded()));
            if (!MessageDigest.isEqual(pin, got.getBytes(java.nio.charset.StandardCharsets.US_ASCII))) {
                throw new CertificateException("the coordinator's certificate is not the pinned one (sha256 " + got + ")");
            }
        }

        @Override
        public void checkClientTrusted(X509Certificate[] chain, String authType) throws CertificateException {
            throw new CertificateException("a device trusts no clients");
        }

        @Override
        public X509Certificate[] getAcceptedIssuers() {
            return new X509Certificate[0];
        }
    }
}
