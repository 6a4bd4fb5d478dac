// pgjdbc reading a result far larger than the query's memory share with a
// fetch size: outside autocommit it binds a named portal and Executes it
// 1000 rows at a time, the query live (paused) in between.
//
//     java -cp /usr/share/java/postgresql.jar JdbcFetchSize.java HOST PORT SHARE
//
// Prints the fetched rows' count and checksums, then the same computed by
// the server with count/sum, for crates/stride/tests/portals.rs to compare.
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.ResultSet;
import java.sql.Statement;

public class JdbcFetchSize {
    public static void main(String[] args) throws Exception {
        String url = "jdbc:postgresql://" + args[0] + ":" + args[1]
            + "/stride?user=stride&sslmode=disable";
        try (Connection conn = DriverManager.getConnection(url)) {
            Statement settings = conn.createStatement();
            settings.execute("set stride.query_memory_limit = '" + args[2] + "'");
            conn.setAutoCommit(false);
            long rows = 0, keys = 0, chars = 0;
            try (Statement st = conn.createStatement()) {
                st.setFetchSize(1000);
                try (ResultSet rs = st.executeQuery(
                        "select l_orderkey, l_linenumber, l_comment from lineitem as jdbc_fetch")) {
                    while (rs.next()) {
                        rows++;
                        keys += rs.getLong(1) * 10 + rs.getInt(2);
                        chars += rs.getString(3).codePointCount(0, rs.getString(3).length());
                    }
                }
            }
            conn.commit();
            System.out.println("rows=" + rows + " keys=" + keys + " chars=" + chars);
            try (Statement st = conn.createStatement();
                 ResultSet rs = st.executeQuery(
                     "select count(*), cast(sum(l_orderkey * 10 + l_linenumber) as bigint), "
                     + "cast(sum(length(l_comment)) as bigint) from lineitem")) {
                rs.next();
                System.out.println("rows=" + rs.getLong(1) + " keys=" + rs.getLong(2)
                    + " chars=" + rs.getLong(3));
            }
            conn.commit();
        }
    }
}
