//! TPC-DS data through `tpcdsgen` (a Rust port of the specification's
//! `dsdgen`, byte-for-byte the C generator's output).
//!
//! `tpcdsgen` produces rows whose `Display` is the DAT line of `dsdgen`
//! (`|`-separated, an empty field or the literal `NULL` for NULL); each line
//! is parsed into the column types of the specification's schema
//! ([`SCHEMAS`]): identifiers and integers as `Int32`, `decimal(p,2)` as
//! `Decimal128(p, 2)`, dates as `Date32`, `char`/`varchar` as `Utf8`.
//!
//! Large tables are generated in parts (ranges of source rows) on several
//! threads; the parts are concatenated in part order, so the result does not
//! depend on the thread count.

use std::fmt::Write as _;
use std::sync::Arc;

use arrow::array::{
    ArrayRef, Date32Builder, Decimal128Builder, Int32Builder, RecordBatch, StringBuilder,
};
use arrow::compute::kernels::cast_utils::{parse_decimal, Parser};
use arrow::datatypes::{DataType, Date32Type, Decimal128Type, Field, Schema, SchemaRef};
use tpcdsgen::config::{Session, SessionBuilder, Table as DsTable};
use tpcdsgen::row;

use crate::error::{Result, StorageError};
use crate::table::Table;
use crate::DEFAULT_BLOCK_ROWS;

/// The 24 TPC-DS tables (dimensions first).
pub const TABLES: [&str; 24] = [
    "call_center",
    "catalog_page",
    "customer",
    "customer_address",
    "customer_demographics",
    "date_dim",
    "household_demographics",
    "income_band",
    "item",
    "promotion",
    "reason",
    "ship_mode",
    "store",
    "time_dim",
    "warehouse",
    "web_page",
    "web_site",
    "inventory",
    "catalog_returns",
    "catalog_sales",
    "store_returns",
    "store_sales",
    "web_returns",
    "web_sales",
];

/// Source rows per part of a large table (tickets or orders for the sales
/// tables, whose rows are their line items).
const SOURCE_ROWS_PER_PART: u64 = 50_000;

/// The specification's schema of each table, columns in DAT order as
/// `name type`: `int` (integer or identifier), `dec5`/`dec7`/`dec15`
/// (`decimal(p,2)`), `date`, `str` (`char(n)` / `varchar(n)`).
pub const SCHEMAS: [(&str, &str); 24] = [
    (
        "call_center",
        "cc_call_center_sk int, cc_call_center_id str, cc_rec_start_date date, \
         cc_rec_end_date date, cc_closed_date_sk int, cc_open_date_sk int, cc_name str, \
         cc_class str, cc_employees int, cc_sq_ft int, cc_hours str, cc_manager str, \
         cc_mkt_id int, cc_mkt_class str, cc_mkt_desc str, cc_market_manager str, \
         cc_division int, cc_division_name str, cc_company int, cc_company_name str, \
         cc_street_number str, cc_street_name str, cc_street_type str, cc_suite_number str, \
         cc_city str, cc_county str, cc_state str, cc_zip str, cc_country str, \
         cc_gmt_offset dec5, cc_tax_percentage dec5",
    ),
    (
        "catalog_page",
        "cp_catalog_page_sk int, cp_catalog_page_id str, cp_start_date_sk int, \
         cp_end_date_sk int, cp_department str, cp_catalog_number int, \
         cp_catalog_page_number int, cp_description str, cp_type str",
    ),
    (
        "customer",
        "c_customer_sk int, c_customer_id str, c_current_cdemo_sk int, c_current_hdemo_sk int, \
         c_current_addr_sk int, c_first_shipto_date_sk int, c_first_sales_date_sk int, \
         c_salutation str, c_first_name str, c_last_name str, c_preferred_cust_flag str, \
         c_birth_day int, c_birth_month int, c_birth_year int, c_birth_country str, \
         c_login str, c_email_address str, c_last_review_date_sk int",
    ),
    (
        "customer_address",
        "ca_address_sk int, ca_address_id str, ca_street_number str, ca_street_name str, \
         ca_street_type str, ca_suite_number str, ca_city str, ca_county str, ca_state str, \
         ca_zip str, ca_country str, ca_gmt_offset dec5, ca_location_type str",
    ),
    (
        "customer_demographics",
        "cd_demo_sk int, cd_gender str, cd_marital_status str, cd_education_status str, \
         cd_purchase_estimate int, cd_credit_rating str, cd_dep_count int, \
         cd_dep_employed_count int, cd_dep_college_count int",
    ),
    (
        "date_dim",
        "d_date_sk int, d_date_id str, d_date date, d_month_seq int, d_week_seq int, \
         d_quarter_seq int, d_year int, d_dow int, d_moy int, d_dom int, d_qoy int, \
         d_fy_year int, d_fy_quarter_seq int, d_fy_week_seq int, d_day_name str, \
         d_quarter_name str, d_holiday str, d_weekend str, d_following_holiday str, \
         d_first_dom int, d_last_dom int, d_same_day_ly int, d_same_day_lq int, \
         d_current_day str, d_current_week str, d_current_month str, d_current_quarter str, \
         d_current_year str",
    ),
    (
        "household_demographics",
        "hd_demo_sk int, hd_income_band_sk int, hd_buy_potential str, hd_dep_count int, \
         hd_vehicle_count int",
    ),
    (
        "income_band",
        "ib_income_band_sk int, ib_lower_bound int, ib_upper_bound int",
    ),
    (
        "item",
        "i_item_sk int, i_item_id str, i_rec_start_date date, i_rec_end_date date, \
         i_item_desc str, i_current_price dec7, i_wholesale_cost dec7, i_brand_id int, \
         i_brand str, i_class_id int, i_class str, i_category_id int, i_category str, \
         i_manufact_id int, i_manufact str, i_size str, i_formulation str, i_color str, \
         i_units str, i_container str, i_manager_id int, i_product_name str",
    ),
    (
        "promotion",
        "p_promo_sk int, p_promo_id str, p_start_date_sk int, p_end_date_sk int, \
         p_item_sk int, p_cost dec15, p_response_target int, p_promo_name str, \
         p_channel_dmail str, p_channel_email str, p_channel_catalog str, p_channel_tv str, \
         p_channel_radio str, p_channel_press str, p_channel_event str, p_channel_demo str, \
         p_channel_details str, p_purpose str, p_discount_active str",
    ),
    (
        "reason",
        "r_reason_sk int, r_reason_id str, r_reason_desc str",
    ),
    (
        "ship_mode",
        "sm_ship_mode_sk int, sm_ship_mode_id str, sm_type str, sm_code str, sm_carrier str, \
         sm_contract str",
    ),
    (
        "store",
        "s_store_sk int, s_store_id str, s_rec_start_date date, s_rec_end_date date, \
         s_closed_date_sk int, s_store_name str, s_number_employees int, s_floor_space int, \
         s_hours str, s_manager str, s_market_id int, s_geography_class str, \
         s_market_desc str, s_market_manager str, s_division_id int, s_division_name str, \
         s_company_id int, s_company_name str, s_street_number str, s_street_name str, \
         s_street_type str, s_suite_number str, s_city str, s_county str, s_state str, \
         s_zip str, s_country str, s_gmt_offset dec5, s_tax_precentage dec5",
    ),
    (
        "time_dim",
        "t_time_sk int, t_time_id str, t_time int, t_hour int, t_minute int, t_second int, \
         t_am_pm str, t_shift str, t_sub_shift str, t_meal_time str",
    ),
    (
        "warehouse",
        "w_warehouse_sk int, w_warehouse_id str, w_warehouse_name str, w_warehouse_sq_ft int, \
         w_street_number str, w_street_name str, w_street_type str, w_suite_number str, \
         w_city str, w_county str, w_state str, w_zip str, w_country str, w_gmt_offset dec5",
    ),
    (
        "web_page",
        "wp_web_page_sk int, wp_web_page_id str, wp_rec_start_date date, \
         wp_rec_end_date date, wp_creation_date_sk int, wp_access_date_sk int, \
         wp_autogen_flag str, wp_customer_sk int, wp_url str, wp_type str, \
         wp_char_count int, wp_link_count int, wp_image_count int, wp_max_ad_count int",
    ),
    (
        "web_site",
        "web_site_sk int, web_site_id str, web_rec_start_date date, web_rec_end_date date, \
         web_name str, web_open_date_sk int, web_close_date_sk int, web_class str, \
         web_manager str, web_mkt_id int, web_mkt_class str, web_mkt_desc str, \
         web_market_manager str, web_company_id int, web_company_name str, \
         web_street_number str, web_street_name str, web_street_type str, \
         web_suite_number str, web_city str, web_county str, web_state str, web_zip str, \
         web_country str, web_gmt_offset dec5, web_tax_percentage dec5",
    ),
    (
        "inventory",
        "inv_date_sk int, inv_item_sk int, inv_warehouse_sk int, inv_quantity_on_hand int",
    ),
    (
        "catalog_returns",
        "cr_returned_date_sk int, cr_returned_time_sk int, cr_item_sk int, \
         cr_refunded_customer_sk int, cr_refunded_cdemo_sk int, cr_refunded_hdemo_sk int, \
         cr_refunded_addr_sk int, cr_returning_customer_sk int, cr_returning_cdemo_sk int, \
         cr_returning_hdemo_sk int, cr_returning_addr_sk int, cr_call_center_sk int, \
         cr_catalog_page_sk int, cr_ship_mode_sk int, cr_warehouse_sk int, cr_reason_sk int, \
         cr_order_number int, cr_return_quantity int, cr_return_amount dec7, \
         cr_return_tax dec7, cr_return_amt_inc_tax dec7, cr_fee dec7, \
         cr_return_ship_cost dec7, cr_refunded_cash dec7, cr_reversed_charge dec7, \
         cr_store_credit dec7, cr_net_loss dec7",
    ),
    (
        "catalog_sales",
        "cs_sold_date_sk int, cs_sold_time_sk int, cs_ship_date_sk int, \
         cs_bill_customer_sk int, cs_bill_cdemo_sk int, cs_bill_hdemo_sk int, \
         cs_bill_addr_sk int, cs_ship_customer_sk int, cs_ship_cdemo_sk int, \
         cs_ship_hdemo_sk int, cs_ship_addr_sk int, cs_call_center_sk int, \
         cs_catalog_page_sk int, cs_ship_mode_sk int, cs_warehouse_sk int, cs_item_sk int, \
         cs_promo_sk int, cs_order_number int, cs_quantity int, cs_wholesale_cost dec7, \
         cs_list_price dec7, cs_sales_price dec7, cs_ext_discount_amt dec7, \
         cs_ext_sales_price dec7, cs_ext_wholesale_cost dec7, cs_ext_list_price dec7, \
         cs_ext_tax dec7, cs_coupon_amt dec7, cs_ext_ship_cost dec7, cs_net_paid dec7, \
         cs_net_paid_inc_tax dec7, cs_net_paid_inc_ship dec7, cs_net_paid_inc_ship_tax dec7, \
         cs_net_profit dec7",
    ),
    (
        "store_returns",
        "sr_returned_date_sk int, sr_return_time_sk int, sr_item_sk int, sr_customer_sk int, \
         sr_cdemo_sk int, sr_hdemo_sk int, sr_addr_sk int, sr_store_sk int, sr_reason_sk int, \
         sr_ticket_number int, sr_return_quantity int, sr_return_amt dec7, \
         sr_return_tax dec7, sr_return_amt_inc_tax dec7, sr_fee dec7, \
         sr_return_ship_cost dec7, sr_refunded_cash dec7, sr_reversed_charge dec7, \
         sr_store_credit dec7, sr_net_loss dec7",
    ),
    (
        "store_sales",
        "ss_sold_date_sk int, ss_sold_time_sk int, ss_item_sk int, ss_customer_sk int, \
         ss_cdemo_sk int, ss_hdemo_sk int, ss_addr_sk int, ss_store_sk int, ss_promo_sk int, \
         ss_ticket_number int, ss_quantity int, ss_wholesale_cost dec7, ss_list_price dec7, \
         ss_sales_price dec7, ss_ext_discount_amt dec7, ss_ext_sales_price dec7, \
         ss_ext_wholesale_cost dec7, ss_ext_list_price dec7, ss_ext_tax dec7, \
         ss_coupon_amt dec7, ss_net_paid dec7, ss_net_paid_inc_tax dec7, ss_net_profit dec7",
    ),
    (
        "web_returns",
        "wr_returned_date_sk int, wr_returned_time_sk int, wr_item_sk int, \
         wr_refunded_customer_sk int, wr_refunded_cdemo_sk int, wr_refunded_hdemo_sk int, \
         wr_refunded_addr_sk int, wr_returning_customer_sk int, wr_returning_cdemo_sk int, \
         wr_returning_hdemo_sk int, wr_returning_addr_sk int, wr_web_page_sk int, \
         wr_reason_sk int, wr_order_number int, wr_return_quantity int, wr_return_amt dec7, \
         wr_return_tax dec7, wr_return_amt_inc_tax dec7, wr_fee dec7, \
         wr_return_ship_cost dec7, wr_refunded_cash dec7, wr_reversed_charge dec7, \
         wr_account_credit dec7, wr_net_loss dec7",
    ),
    (
        "web_sales",
        "ws_sold_date_sk int, ws_sold_time_sk int, ws_ship_date_sk int, ws_item_sk int, \
         ws_bill_customer_sk int, ws_bill_cdemo_sk int, ws_bill_hdemo_sk int, \
         ws_bill_addr_sk int, ws_ship_customer_sk int, ws_ship_cdemo_sk int, \
         ws_ship_hdemo_sk int, ws_ship_addr_sk int, ws_web_page_sk int, ws_web_site_sk int, \
         ws_ship_mode_sk int, ws_warehouse_sk int, ws_promo_sk int, ws_order_number int, \
         ws_quantity int, ws_wholesale_cost dec7, ws_list_price dec7, ws_sales_price dec7, \
         ws_ext_discount_amt dec7, ws_ext_sales_price dec7, ws_ext_wholesale_cost dec7, \
         ws_ext_list_price dec7, ws_ext_tax dec7, ws_coupon_amt dec7, ws_ext_ship_cost dec7, \
         ws_net_paid dec7, ws_net_paid_inc_tax dec7, ws_net_paid_inc_ship dec7, \
         ws_net_paid_inc_ship_tax dec7, ws_net_profit dec7",
    ),
];

/// Generates all 24 tables at `scale` using up to `threads` threads.
pub fn generate(scale: f64, threads: usize) -> Result<Vec<Table>> {
    if !(scale > 0.0 && scale.is_finite()) || scale > 100_000.0 {
        return Err(StorageError::InvalidArgument(format!(
            "TPC-DS scale factor must be in (0, 100000], got {scale}"
        )));
    }
    TABLES
        .iter()
        .map(|name| generate_table(name, scale, threads))
        .collect()
}

/// The Arrow schema of a TPC-DS table (see [`SCHEMAS`]).
pub fn schema(name: &str) -> Result<SchemaRef> {
    let (_, columns) = SCHEMAS
        .iter()
        .find(|(table, _)| *table == name)
        .ok_or_else(|| unknown_table(name))?;
    let fields = columns
        .split(',')
        .map(|column| {
            let (column, ty) = column
                .trim()
                .split_once(' ')
                .ok_or_else(|| StorageError::Internal(format!("bad column spec {column:?}")))?;
            let ty = match ty {
                "int" => DataType::Int32,
                "dec5" => DataType::Decimal128(5, 2),
                "dec7" => DataType::Decimal128(7, 2),
                "dec15" => DataType::Decimal128(15, 2),
                "date" => DataType::Date32,
                "str" => DataType::Utf8,
                other => {
                    return Err(StorageError::Internal(format!(
                        "bad column type {other:?} of {name}.{column}"
                    )))
                }
            };
            Ok(Field::new(column, ty, true))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Arc::new(Schema::new(fields)))
}

fn unknown_table(name: &str) -> StorageError {
    StorageError::InvalidArgument(format!("unknown TPC-DS table \"{name}\""))
}

/// The generator table whose row count is the number of source rows of
/// `name` (a returns table is generated from its sales table's rows).
fn source(name: &str) -> Result<DsTable> {
    Ok(match name {
        "call_center" => DsTable::CallCenter,
        "catalog_page" => DsTable::CatalogPage,
        "customer" => DsTable::Customer,
        "customer_address" => DsTable::CustomerAddress,
        "customer_demographics" => DsTable::CustomerDemographics,
        "date_dim" => DsTable::DateDim,
        "household_demographics" => DsTable::HouseholdDemographics,
        "income_band" => DsTable::IncomeBand,
        "item" => DsTable::Item,
        "promotion" => DsTable::Promotion,
        "reason" => DsTable::Reason,
        "ship_mode" => DsTable::ShipMode,
        "store" => DsTable::Store,
        "time_dim" => DsTable::TimeDim,
        "warehouse" => DsTable::Warehouse,
        "web_page" => DsTable::WebPage,
        "web_site" => DsTable::WebSite,
        "inventory" => DsTable::Inventory,
        "catalog_sales" | "catalog_returns" => DsTable::CatalogSales,
        "store_sales" | "store_returns" => DsTable::StoreSales,
        "web_sales" | "web_returns" => DsTable::WebSales,
        other => return Err(unknown_table(other)),
    })
}

fn session(scale: f64) -> Result<Session> {
    SessionBuilder::new()
        .with_scale_factor(scale)
        .build()
        .map_err(|e| StorageError::InvalidArgument(format!("TPC-DS scale factor {scale}: {e}")))
}

/// Generates one TPC-DS table.
pub fn generate_table(name: &str, scale: f64, threads: usize) -> Result<Table> {
    generate_in_parts(name, scale, threads, SOURCE_ROWS_PER_PART)
}

/// Generates one table in parts of about `rows_per_part` source rows.
fn generate_in_parts(name: &str, scale: f64, threads: usize, rows_per_part: u64) -> Result<Table> {
    let schema = schema(name)?;
    let session = session(scale)?;
    let rows = session.get_scaling().get_row_count(source(name)?);
    let parts = rows.div_ceil(rows_per_part.max(1)).clamp(1, 4096);
    let ranges: Vec<(u64, u64)> = (0..parts)
        .map(|p| {
            let first = p * rows / parts + 1;
            let last = (p + 1) * rows / parts;
            (first, last)
        })
        .filter(|(first, last)| first <= last)
        .collect();
    let parts = crate::ssb::run_tasks(ranges.len(), threads, |part| {
        let (first, last) = ranges[part];
        let mut sink = DatSink::new(name, schema.clone());
        generate_range(name, session.clone(), rows, first, last, &mut sink)?;
        sink.finish()
    })?;
    Table::new(name, schema, parts.into_iter().flatten().collect())
}

/// Feeds the rows of source rows `first..=last` of `name` into `sink`.
fn generate_range(
    name: &str,
    session: Session,
    rows: u64,
    first: u64,
    last: u64,
    sink: &mut DatSink,
) -> Result<()> {
    macro_rules! feed {
        ($generator:ident) => {{
            let mut generator = row::$generator::new(session, rows);
            generator.set_source_row_range(first, last);
            for r in generator {
                sink.push(&r)?;
            }
        }};
    }
    match name {
        "call_center" => feed!(CallCenterRowGenerator),
        "catalog_page" => feed!(CatalogPageRowGenerator),
        "customer" => feed!(CustomerRowGenerator),
        "customer_address" => feed!(CustomerAddressRowGenerator),
        "customer_demographics" => feed!(CustomerDemographicsRowGenerator),
        "date_dim" => feed!(DateDimRowGenerator),
        "household_demographics" => feed!(HouseholdDemographicsRowGenerator),
        "income_band" => feed!(IncomeBandRowGenerator),
        "item" => feed!(ItemRowGenerator),
        "promotion" => feed!(PromotionRowGenerator),
        "reason" => feed!(ReasonRowGenerator),
        "ship_mode" => feed!(ShipModeRowGenerator),
        "store" => feed!(StoreRowGenerator),
        "time_dim" => feed!(TimeDimRowGenerator),
        "warehouse" => feed!(WarehouseRowGenerator),
        "web_page" => feed!(WebPageRowGenerator),
        "web_site" => feed!(WebSiteRowGenerator),
        "inventory" => feed!(InventoryRowGenerator),
        "catalog_returns" => feed!(CatalogReturnsRowGenerator),
        "catalog_sales" => feed!(CatalogSalesRowGenerator),
        "store_returns" => feed!(StoreReturnsRowGenerator),
        "store_sales" => feed!(StoreSalesRowGenerator),
        "web_returns" => feed!(WebReturnsRowGenerator),
        "web_sales" => feed!(WebSalesRowGenerator),
        other => return Err(unknown_table(other)),
    }
    Ok(())
}

/// One column being built.
enum ColumnBuilder {
    Int(Int32Builder),
    Decimal(Decimal128Builder, u8, i8),
    Date(Date32Builder),
    Str(StringBuilder),
}

impl ColumnBuilder {
    fn new(ty: &DataType) -> Result<Self> {
        Ok(match ty {
            DataType::Int32 => ColumnBuilder::Int(Int32Builder::new()),
            DataType::Decimal128(p, s) => ColumnBuilder::Decimal(
                Decimal128Builder::new().with_precision_and_scale(*p, *s)?,
                *p,
                *s,
            ),
            DataType::Date32 => ColumnBuilder::Date(Date32Builder::new()),
            DataType::Utf8 => ColumnBuilder::Str(StringBuilder::new()),
            other => return Err(StorageError::Internal(format!("TPC-DS column of {other}"))),
        })
    }

    /// Appends one DAT field (empty or `NULL`: a NULL); `None` when the
    /// text is not a value of the column's type.
    fn push(&mut self, text: &str) -> Option<()> {
        let null = text.is_empty() || text == "NULL";
        match self {
            ColumnBuilder::Int(b) if null => b.append_null(),
            ColumnBuilder::Int(b) => b.append_value(text.parse().ok()?),
            ColumnBuilder::Decimal(b, _, _) if null => b.append_null(),
            ColumnBuilder::Decimal(b, p, s) => {
                b.append_value(parse_decimal::<Decimal128Type>(text, *p, *s).ok()?)
            }
            ColumnBuilder::Date(b) if null => b.append_null(),
            ColumnBuilder::Date(b) => b.append_value(Date32Type::parse(text)?),
            ColumnBuilder::Str(b) if null => b.append_null(),
            ColumnBuilder::Str(b) => b.append_value(text),
        }
        Some(())
    }

    fn finish(&mut self) -> Result<ArrayRef> {
        Ok(match self {
            ColumnBuilder::Int(b) => Arc::new(b.finish()),
            ColumnBuilder::Decimal(b, p, s) => {
                Arc::new(b.finish().with_precision_and_scale(*p, *s)?)
            }
            ColumnBuilder::Date(b) => Arc::new(b.finish()),
            ColumnBuilder::Str(b) => Arc::new(b.finish()),
        })
    }
}

/// Parses DAT lines into record batches of [`DEFAULT_BLOCK_ROWS`] rows.
struct DatSink<'a> {
    table: &'a str,
    schema: SchemaRef,
    columns: Vec<ColumnBuilder>,
    rows: usize,
    line: String,
    batches: Vec<RecordBatch>,
}

impl<'a> DatSink<'a> {
    fn new(table: &'a str, schema: SchemaRef) -> Self {
        DatSink {
            table,
            schema,
            columns: Vec::new(),
            rows: 0,
            line: String::new(),
            batches: Vec::new(),
        }
    }

    fn push(&mut self, row: &dyn std::fmt::Display) -> Result<()> {
        if self.columns.is_empty() {
            self.columns = self
                .schema
                .fields()
                .iter()
                .map(|f| ColumnBuilder::new(f.data_type()))
                .collect::<Result<_>>()?;
        }
        self.line.clear();
        write!(self.line, "{row}")
            .map_err(|e| StorageError::Internal(format!("formatting a TPC-DS row: {e}")))?;
        // A DAT line ends with a separator after its last field.
        let body = self.line.strip_suffix('|').unwrap_or(&self.line);
        let mut fields = body.split('|');
        for (i, column) in self.columns.iter_mut().enumerate() {
            let text = fields.next().ok_or_else(|| {
                StorageError::Internal(format!(
                    "TPC-DS {} row with {i} fields, expected {}: {body:?}",
                    self.table,
                    self.schema.fields().len()
                ))
            })?;
            column.push(text).ok_or_else(|| {
                StorageError::Internal(format!(
                    "TPC-DS {}.{}: {text:?} is not a {}",
                    self.table,
                    self.schema.field(i).name(),
                    self.schema.field(i).data_type()
                ))
            })?;
        }
        if fields.next().is_some() {
            return Err(StorageError::Internal(format!(
                "TPC-DS {} row with more than {} fields: {body:?}",
                self.table,
                self.schema.fields().len()
            )));
        }
        self.rows += 1;
        if self.rows == DEFAULT_BLOCK_ROWS {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        if self.rows == 0 {
            return Ok(());
        }
        let arrays = self
            .columns
            .iter_mut()
            .map(ColumnBuilder::finish)
            .collect::<Result<Vec<_>>>()?;
        self.batches
            .push(RecordBatch::try_new(self.schema.clone(), arrays)?);
        self.rows = 0;
        Ok(())
    }

    fn finish(mut self) -> Result<Vec<RecordBatch>> {
        self.flush()?;
        Ok(self.batches)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_table_has_a_valid_schema() {
        for name in TABLES {
            let schema = schema(name).unwrap();
            assert!(schema.fields().len() >= 3, "{name}");
            source(name).unwrap();
        }
        assert!(schema("nope").is_err());
    }

    #[test]
    fn small_tables_parse_and_do_not_depend_on_threads() {
        for name in [
            "date_dim",
            "store",
            "call_center",
            "household_demographics",
            "item",
        ] {
            let one = generate_table(name, 0.01, 1).unwrap();
            let two = generate_table(name, 0.01, 2).unwrap();
            assert!(one.num_rows() > 0, "{name}");
            assert_eq!(one.num_rows(), two.num_rows(), "{name}");
            assert_eq!(one.blocks()[..], two.blocks()[..], "{name}");
        }
    }

    #[test]
    fn date_dim_matches_the_specification() {
        let t = generate_table("date_dim", 0.01, 2).unwrap();
        // 1900-01-02 .. 2100-01-01: 73049 days.
        assert_eq!(t.num_rows(), 73_049);
    }

    #[test]
    fn parts_concatenate_to_the_whole_table() {
        // Generated in one range of source rows, and in parts of 1,000 on
        // one and on two threads: the same rows (block boundaries aside).
        for name in ["store_sales", "catalog_returns", "inventory"] {
            let whole = generate_in_parts(name, 0.01, 1, u64::MAX).unwrap();
            let rows = |t: &Table| {
                let batches: Vec<RecordBatch> = t.blocks().to_vec();
                arrow::compute::concat_batches(t.schema(), &batches).unwrap()
            };
            for threads in [1, 2] {
                let parted = generate_in_parts(name, 0.01, threads, 1_000).unwrap();
                assert!(whole.num_rows() > 0, "{name}");
                assert_eq!(rows(&whole), rows(&parted), "{name} on {threads} threads");
            }
        }
    }

    #[test]
    fn scale_factor_is_checked() {
        assert!(generate(0.0, 1).is_err());
        assert!(generate(f64::NAN, 1).is_err());
    }
}
