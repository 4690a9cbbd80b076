// Command trialog-environment serves environment implementations of a Trialog spec from Go.
//
//	trialog-environment --schemas schemas --serve go_rps=rps
//
// Each --serve IMPL=ENV hosts the trials of the spec's (external) environment IMPL with
// one of the example environments, as the consumer group env.IMPL. Connection: --brokers
// or TRIALOG_BOOTSTRAP_SERVERS, --topic-prefix or TRIALOG_TOPIC_PREFIX; keys: --keyring
// or TRIALOG_KEYRING (a keyring file or folder), else the TRIALOG_KEY_* variables, else
// the development keyring for a broker on this machine.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"syscall"

	"github.com/trialog/trialog/sdk/go/examples"
	"github.com/trialog/trialog/sdk/go/trialog"
)

type serveFlags []string

func (s *serveFlags) String() string     { return strings.Join(*s, ",") }
func (s *serveFlags) Set(v string) error { *s = append(*s, v); return nil }

func env(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}

func main() {
	var serve serveFlags
	brokers := flag.String("brokers", env("TRIALOG_BOOTSTRAP_SERVERS", "127.0.0.1:9092"), "Kafka bootstrap servers, comma-separated")
	prefix := flag.String("topic-prefix", env("TRIALOG_TOPIC_PREFIX", "trialog."), "the deployment's topic prefix")
	schemas := flag.String("schemas", "schemas", "Trialog's schemas/ directory")
	keyring := flag.String("keyring", os.Getenv("TRIALOG_KEYRING"), "keyring file or folder (default: the TRIALOG_KEY_* variables, else the development keyring for a local broker)")
	flag.Var(&serve, "serve", "IMPL=ENV: host the trials of environment implementation IMPL with ENV (repeatable)")
	flag.Parse()
	names := make([]string, 0, len(examples.Environments))
	for n := range examples.Environments {
		names = append(names, n)
	}
	sort.Strings(names)
	if len(serve) == 0 {
		fmt.Fprintf(os.Stderr, "trialog-environment: nothing to serve: pass --serve IMPL=ENV (environments: %s)\n", strings.Join(names, ", "))
		os.Exit(2)
	}
	store, err := trialog.LoadDir(*schemas)
	if err != nil {
		log.Fatalf("trialog-environment: %v", err)
	}
	keys, err := trialog.LoadKeyring(*keyring, strings.Split(*brokers, ","))
	if err != nil {
		log.Fatalf("trialog-environment: %v", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	var wg sync.WaitGroup
	for _, s := range serve {
		impl, name, _ := strings.Cut(s, "=")
		factory, ok := examples.Environments[name]
		if impl == "" || !ok {
			log.Fatalf("trialog-environment: --serve %q: want IMPL=ENV with ENV one of %s", s, strings.Join(names, ", "))
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			cfg := trialog.EnvironmentConfig{Brokers: strings.Split(*brokers, ","), TopicPrefix: *prefix, Implementation: impl,
				Store: store, Keyring: keys, NewEnvironment: factory}
			if err := trialog.ServeEnvironment(ctx, cfg); err != nil {
				log.Printf("trialog-environment: %s: %v", impl, err)
				stop()
			}
		}()
	}
	wg.Wait()
}
