// bench/peers/go/http_hello: the Go peer of examples/http_hello.lua, a net/http server that
// answers every request with "Hello, World!" (keep-alive), for ./dev.sh bench-http.
// Run: GOMAXPROCS=2 http_hello PORT
package main

import (
	"fmt"
	"net/http"
	"os"
)

func main() {
	port := "8080"
	if len(os.Args) > 1 {
		port = os.Args[1]
	}
	body := []byte("Hello, World!")
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Write(body)
	})
	fmt.Println("listening on " + port)
	if err := http.ListenAndServe("127.0.0.1:"+port, nil); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
