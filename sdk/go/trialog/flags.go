package trialog

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"strings"
	"sync"
)

// CommandFlags are the settings Trialog's Go commands share: the connection (--brokers
// or TRIALOG_BOOTSTRAP_SERVERS, --topic-prefix or TRIALOG_TOPIC_PREFIX), Trialog's
// --schemas, the --keyring (TRIALOG_KEYRING) and the repeatable --serve IMPL=NAME.
type CommandFlags struct {
	Brokers     string
	TopicPrefix string
	Schemas     string
	Keyring     string
	Serve       []string // IMPL=NAME, as given
}

// ConfigFromFlags defines the shared flags on fs, with the commands' own words for
// --keyring and --serve; their values are set when fs is parsed.
func ConfigFromFlags(fs *flag.FlagSet, keyringUsage, serveUsage string) *CommandFlags {
	f := &CommandFlags{}
	fs.StringVar(&f.Brokers, "brokers", EnvOr("TRIALOG_BOOTSTRAP_SERVERS", "127.0.0.1:9092"), "Kafka bootstrap servers, comma-separated")
	fs.StringVar(&f.TopicPrefix, "topic-prefix", EnvOr("TRIALOG_TOPIC_PREFIX", "trialog."), "the deployment's topic prefix")
	fs.StringVar(&f.Schemas, "schemas", "schemas", "Trialog's schemas/ directory")
	fs.StringVar(&f.Keyring, "keyring", os.Getenv("TRIALOG_KEYRING"), keyringUsage)
	fs.Var((*serveList)(&f.Serve), "serve", serveUsage)
	return f
}

// BrokerList is --brokers split at its commas.
func (f *CommandFlags) BrokerList() []string { return strings.Split(f.Brokers, ",") }

// EnvOr is the environment variable name, or fallback when it is unset or empty.
func EnvOr(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}

type serveList []string

func (s *serveList) String() string     { return strings.Join(*s, ",") }
func (s *serveList) Set(v string) error { *s = append(*s, v); return nil }

// Choices lists the names of choices, sorted and comma-separated, for messages.
func Choices[F any](choices map[string]F) string { return strings.Join(sortedKeys(choices), ", ") }

// ServeChoice splits a --serve value IMPL=NAME and looks NAME up in choices; what
// names a NAME (AGENT, ENV) words the error.
func ServeChoice[F any](value, what string, choices map[string]F) (impl string, choice F, err error) {
	impl, name, _ := strings.Cut(value, "=")
	choice, ok := choices[name]
	if impl == "" || !ok {
		return "", choice, fmt.Errorf("--serve %q: want IMPL=%s with %s one of %s", value, what, what, Choices(choices))
	}
	return impl, choice, nil
}

// ServiceGroup runs a command's services, each in its own goroutine: one that fails is
// logged and stops the others.
type ServiceGroup struct {
	ctx     context.Context
	stop    context.CancelFunc
	command string
	wg      sync.WaitGroup
}

// NewServiceGroup runs services under ctx; stop cancels it.
func NewServiceGroup(ctx context.Context, stop context.CancelFunc, command string) *ServiceGroup {
	return &ServiceGroup{ctx: ctx, stop: stop, command: command}
}

// Go starts the service of implementation impl.
func (g *ServiceGroup) Go(impl string, run func(context.Context) error) {
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		if err := run(g.ctx); err != nil {
			log.Printf("%s: %s: %v", g.command, impl, err)
			g.stop()
		}
	}()
}

// Wait returns when every service has.
func (g *ServiceGroup) Wait() { g.wg.Wait() }
