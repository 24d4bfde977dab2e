module github.com/firn-db/firn/sdk/go

go 1.24
