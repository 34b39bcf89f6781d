package main

import (
	"errors"

	"github.com/urfave/cli/v2"
)

func devCommand() *cli.Command {
	return &cli.Command{Name: "dev", Usage: "embedded Redis + local store + worker + scheduler + monitor, one process",
		Action: func(c *cli.Context) error { return errors.New("spool dev: not available in this build yet") }}
}
