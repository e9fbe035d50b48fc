/** Any JSON value. */
type JSONValue = null | boolean | number | string | JSONValue[] | { [key: string]: JSONValue };

/** A number that must be a whole number. */
type integer = number;

/** Where a reading was taken. */
type Place = {
  name: string;
  /**
   * Latitude, in degrees.
   * @minimum -90
   * @maximum 90
   */
  lat: number;
  /**
   * @minimum -180
   * @maximum 180
   */
  lon: number;
};

/** A time window (ISO 8601 dates). */
type Window = {
  start: string;
  /** @default null */
  end?: string | null;
};

/** Search options. */
type Options = {
  limit?: integer;
  sort?: "asc" | "desc";
};

/**
 * One reading.
 *
 * Readings are taken hourly; a missing one is null, never zero.
 */
type Reading = {
  place: Place;
  value: number | null;
  /** @default "c" */
  unit?: "c" | "f";
  /**
   * @uniqueItems
   * @default []
   */
  tags?: string[];
};

/** A node of a category tree. */
type Node = {
  /**
   * @minLength 1
   * @maxLength 40
   */
  label: string;
  children?: Node[];
};

/** A node of a category tree. */
type CatalogCategoriesResult = {
  /**
   * @minLength 1
   * @maxLength 40
   */
  label: string;
  children?: CatalogCategoriesResult[];
};

type Date_2 = {
  y: integer;
} & { [key: string]: JSONValue };

declare const weather: {
  /**
   * Readings at a place over a time window.
   *
   * Use `hours` to pick hours of the day. A comment closer *\/ is harmless here.
   * @throws ToolFailure whose error._tag is "NotFound"
   * @throws ToolFailure whose error._tag is "Throttled"
   */
  readings(input: {
    /** Where. */
    place: Place;
    /** When. */
    window: Window;
    /**
     * The unit of every value.
     * @default "c"
     */
    unit?: "c" | "f";
    /**
     * Hours of the day (0-23); all when absent.
     * @default null
     */
    hours?: integer[] | null;
    /**
     * Paging and order.
     * @default null
     */
    options?: Options | null;
  }): Promise<Reading[]>;
  /** Summary statistics. */
  stats(input: {
    /** The sample. */
    values: number[];
    /** A name and a weight. */
    pair: [string, integer];
    /** Named scores. */
    scores: { [key: string]: number };
    /**
     * Whether to include the raw sample.
     * @default false
     */
    flag?: boolean;
  }): Promise<{ [key: string]: JSONValue }>;
};

declare const catalog: {
  /**
   * The category tree under a root.
   * @returns A node of a category tree.
   */
  categories(input: {
    /** The tree to start from. */
    root: Node;
    /**
     * How deep to go.
     * @default 1
     */
    depth?: integer;
  }): Promise<CatalogCategoriesResult>;
  /**
   * Search the legacy index (a tool mapped from another server).
   * @param input Query
   */
  legacy_search(input: {
    /**
     * Query text.
     * @example "oslo weather"
     */
    q: string;
    mode?: "fast";
    /** @format date */
    since?: string | null;
    /**
     * @minimum 1
     * @deprecated
     */
    page?: integer;
    filters?: { [key: string]: string[] };
    extra?: JSONValue;
    point?: [number, number, string?];
    when?: Date_2;
    either?: string | Date_2;
    labelled?: Array</** A label. */ string>;
    maybe?: [string, (string | null)?];
    open?: ({
      a?: string;
    } & { [key: string]: JSONValue })[];
    "api-version": JSONValue;
  } & { [key: string]: JSONValue }): Promise<{
    hits?: integer;
  } & { [key: string]: JSONValue }>;
};

declare const health: {
  /** Says the service is up. */
  ping(input?: Record<string, never>): Promise<JSONValue>;
};
