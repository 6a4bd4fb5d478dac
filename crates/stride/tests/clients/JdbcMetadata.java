// pgjdbc's DatabaseMetaData, as DBeaver and Metabase browse a database:
// schemas, tables, columns, and a prepared query on the table found.
//
//     java -cp /usr/share/java/postgresql.jar JdbcMetadata.java HOST PORT
//
// Prints one line per probe for crates/stride/tests/catalogs.rs to check;
// a probe that fails prints its SQLSTATE.
import java.sql.Connection;
import java.sql.DatabaseMetaData;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.List;

public class JdbcMetadata {
    interface Probe {
        String run() throws SQLException;
    }

    static void probe(String name, Probe p) {
        try {
            System.out.println(name + " " + p.run());
        } catch (SQLException e) {
            System.out.println(name + " failed " + e.getSQLState() + " " + e.getMessage());
        }
    }

    public static void main(String[] args) throws Exception {
        String url = "jdbc:postgresql://" + args[0] + ":" + args[1]
            + "/stride?user=stride&sslmode=disable";
        try (Connection c = DriverManager.getConnection(url)) {
            Statement s = c.createStatement();
            s.execute("create schema jdbc_meta");
            s.execute("create table jdbc_meta.items (id int not null, name varchar, price decimal(8,2))");
            s.execute("insert into jdbc_meta.items values (1, 'pen', 1.50), (2, 'ink', 7.25)");
            DatabaseMetaData md = c.getMetaData();
            probe("product", () -> md.getDatabaseProductName() + " " + md.getDatabaseMajorVersion());
            probe("schemas", () -> {
                List<String> out = new ArrayList<>();
                try (ResultSet rs = md.getSchemas()) {
                    while (rs.next()) {
                        out.add(rs.getString("TABLE_SCHEM"));
                    }
                }
                return String.join(",", out);
            });
            probe("tables", () -> {
                List<String> out = new ArrayList<>();
                try (ResultSet rs = md.getTables(null, "jdbc_meta", "%", new String[] {"TABLE"})) {
                    while (rs.next()) {
                        out.add(rs.getString("TABLE_SCHEM") + "." + rs.getString("TABLE_NAME")
                            + ":" + rs.getString("TABLE_TYPE"));
                    }
                }
                return String.join(",", out);
            });
            probe("columns", () -> {
                List<String> out = new ArrayList<>();
                try (ResultSet rs = md.getColumns(null, "jdbc_meta", "items", "%")) {
                    while (rs.next()) {
                        out.add(rs.getString("COLUMN_NAME") + ":" + rs.getString("TYPE_NAME")
                            + ":" + rs.getInt("NULLABLE"));
                    }
                }
                return String.join(",", out);
            });
            probe("query", () -> {
                try (PreparedStatement q = c.prepareStatement(
                        "select name from jdbc_meta.items where price > ? order by id")) {
                    q.setBigDecimal(1, new java.math.BigDecimal("2"));
                    try (ResultSet rs = q.executeQuery()) {
                        rs.next();
                        return rs.getString(1);
                    }
                }
            });
            s.execute("drop table jdbc_meta.items");
            s.execute("drop schema jdbc_meta");
        }
    }
}
