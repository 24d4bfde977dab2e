module github.com/firn-db/firn/examples/functions/fan-out

go 1.24

require github.com/firn-db/firn/sdk/go v0.0.0

replace github.com/firn-db/firn/sdk/go => ../../../sdk/go
