// pgjdbc over TLS with SCRAM-SHA-256: a prepared query and the session's
// view of its own connection.
//
//     java -cp /usr/share/java/postgresql.jar JdbcTls.java HOST PORT PASSWORD
//
// Prints "tls <answer>" for the Rust test (crates/stride/tests/auth.rs),
// which runs it against a server that refuses plain text.
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.util.Properties;

public class JdbcTls {
    public static void main(String[] args) throws Exception {
        String url = "jdbc:postgresql://" + args[0] + ":" + args[1] + "/stride";
        Properties props = new Properties();
        props.setProperty("user", "stride");
        props.setProperty("password", args[2]);
        // Encrypted, the self-signed certificate not verified (libpq's
        // sslmode=require).
        props.setProperty("sslmode", "require");
        props.setProperty("sslfactory", "org.postgresql.ssl.NonValidatingFactory");
        props.setProperty("prepareThreshold", "1");
        try (Connection c = DriverManager.getConnection(url, props);
             PreparedStatement q = c.prepareStatement("select ? + 2")) {
            q.setInt(1, 40);
            try (ResultSet rs = q.executeQuery()) {
                rs.next();
                System.out.println("tls " + rs.getInt(1));
            }
        }
    }
}
