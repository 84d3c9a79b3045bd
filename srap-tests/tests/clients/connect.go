// Opens N TCP connections to ADDR from N goroutines released at the same
// moment, prints their local ports, and holds them until killed.
// usage: connect ADDR N
package main

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

func main() {
	addr := os.Args[1]
	count, err := strconv.Atoi(os.Args[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, "N:", err)
		os.Exit(2)
	}
	conns := make([]net.Conn, count)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range conns {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			<-start
			c, err := net.Dial("tcp", addr)
			if err != nil {
				fmt.Fprintln(os.Stderr, "dial:", err)
				os.Exit(1)
			}
			conns[i] = c
		}(i)
	}
	close(start)
	wg.Wait()
	ports := make([]string, 0, count)
	for _, c := range conns {
		ports = append(ports, strconv.Itoa(c.LocalAddr().(*net.TCPAddr).Port))
	}
	fmt.Println(strings.Join(ports, " "))
	time.Sleep(60 * time.Second)
}
