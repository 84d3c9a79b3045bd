// Opens N TCP connections to HOST:PORT with java.net.Socket (dual-stack
// AF_INET6 sockets by default on Linux), prints their local ports, and
// holds them until killed. Run as `java Connect.java HOST PORT N`.
import java.net.Socket;
import java.util.ArrayList;
import java.util.List;

public class Connect {
    public static void main(String[] args) throws Exception {
        String host = args[0];
        int port = Integer.parseInt(args[1]);
        int count = Integer.parseInt(args[2]);
        List<Socket> held = new ArrayList<>();
        StringBuilder ports = new StringBuilder();
        for (int i = 0; i < count; i++) {
            Socket socket = new Socket(host, port);
            held.add(socket);
            ports.append(socket.getLocalPort()).append(' ');
        }
        System.out.println(ports.toString().trim());
        System.out.flush();
        Thread.sleep(60_000);
    }
}
