// A pooled client as pgjdbc runs one: server-side prepared statements
// (prepareThreshold=1: named from the first execution) re-executed while
// another connection writes.
//
//     java -cp /usr/share/java/postgresql.jar JdbcPrepared.java HOST PORT
//
// Prints what the reader saw, one line per probe, for the Rust test
// (crates/stride/tests/clients.rs) to check.
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;

public class JdbcPrepared {
    public static void main(String[] args) throws Exception {
        String url = "jdbc:postgresql://" + args[0] + ":" + args[1]
            + "/stride?user=stride&prepareThreshold=1&sslmode=disable";
        try (Connection writer = DriverManager.getConnection(url);
             Connection reader = DriverManager.getConnection(url)) {
            Statement w = writer.createStatement();
            w.execute("create table pooled_jdbc (id int, v int)");
            PreparedStatement insert = writer.prepareStatement("insert into pooled_jdbc values (?, ?)");
            PreparedStatement query = reader.prepareStatement(
                "select count(*), sum(v) from pooled_jdbc where id <= ?");
            StringBuilder seen = new StringBuilder("seen");
            for (int i = 1; i <= 5; i++) {
                insert.setInt(1, i);
                insert.setInt(2, i * 10);
                insert.executeUpdate();
                seen.append(' ').append(probe(query));
            }
            System.out.println(seen);
            w.execute("drop table pooled_jdbc");
            System.out.println("dropped " + probe(query));
            w.execute("create table pooled_jdbc (id int, v int)");
            w.execute("insert into pooled_jdbc values (1, 7)");
            System.out.println("recreated " + probe(query));
            w.execute("drop table pooled_jdbc");
        }
    }

    /// "count:sum", or the SQLSTATE of the error.
    static String probe(PreparedStatement query) {
        try {
            query.setInt(1, 100);
            try (ResultSet rs = query.executeQuery()) {
                rs.next();
                return rs.getLong(1) + ":" + rs.getLong(2);
            }
        } catch (SQLException e) {
            return e.getSQLState();
        }
    }
}
